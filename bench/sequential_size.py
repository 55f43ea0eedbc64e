"""The false-pass rate of `run --stop decided` at a true drop equal to the limit.

Simulates paired items drawn i.i.d. from a superpopulation whose drop is exactly the limit (2 pt and
5 pt), at several discordance rates (the share of items that change), plain and stratified over
unequal strata (a macro mean). The procedure is the product's, read after every batch the runner
sends (1/128 of the task, at least 32 items): the confidence sequence at the shipped rules'
`sequence_share` of alpha decides pass or fail; a replicate that reaches its last item
undecided gets the gate's fixed-n test on all of them at the rest of alpha (verdict/sequential.py).
A pass is either; its rate must stay at or below alpha (0.05): Ville's inequality bounds the
sequence's share, the fixed-n test's exact size the other's, and their sum is alpha. `--share 1`
replays the sequence alone, peeking after every item.

    .venv/bin/python bench/sequential_size.py [--reps 2000] [--share S]

Prints a line per case, then `RESULT bench=sequential_size ... max_false_pass=...`.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from evalsuite.run.stopping import batch_size
from evalsuite.stats.sequential import Population, Sequential, decision
from evalsuite.stats.significance import paired_test
from evalsuite.verdict.rules import Rules, default_rules_path, load_rules

LIMITS = (0.02, 0.05)
DISCORDANCE = (0.05, 0.1, 0.3)
N = {0.02: 14042, 0.05: 1500}  # MMLU's items; a task of some that a 5 pt limit resolves
STRATA = (("plain", [1]), ("stratified", [10, 25, 60, 150, 400]))  # relative stratum sizes


def draws(rng: np.random.Generator, reps: int, n: int, drop: np.ndarray, q: float) -> np.ndarray:
    """reps x n paired drops: +1 (lost) or -1 (gained) at rates (q +- the item's stratum drop) / 2."""
    u = rng.random((reps, n))
    lost, gained = (q + drop) / 2, (q - drop) / 2
    return np.where(u < lost, 1.0, np.where(u < lost + gained, -1.0, 0.0))


def case(rng: np.random.Generator, rules: Rules, reps: int, limit: float, q: float, sizes: list[int]) -> float:
    """The share of replicates the procedure passes. Stratified, each stratum's drop differs (half the
    strata at 2x the limit, half near 0) with the macro mean at the limit: the item-level draws are
    then not alike."""
    n = N[limit]
    counts = np.maximum(1, np.round(np.array(sizes) / sum(sizes) * n)).astype(int)
    keys = [(f"s{k}",) for k, c in enumerate(counts) for _ in range(c)]
    pop = Population.of(keys)
    k = len(counts)
    per = np.full(k, limit) if k == 1 else np.where(np.arange(k) % 2 == 0, 1.5 * limit, 0.5 * limit)
    per += limit - per.mean()  # the macro drop is exactly the limit
    per = np.minimum(per, q)  # a drop cannot exceed the discordance
    if abs(per.mean() - limit) > 1e-12:
        return float("nan")
    passes = 0
    for start in range(0, reps, 250):
        m = min(250, reps - start)
        order = rng.permutation(pop.n)  # the items' stratum in a random order, as the seeded order draws them
        d = draws(rng, m, pop.n, per[pop.cells[order]], q)
        passes += sum(passed(rules, Population(pop.weights[order], pop.cells[order], pop.sizes), row, limit,
                             [keys[i] for i in order]) for row in d)
    return passes / reps


def passed(rules: Rules, pop: Population, d: np.ndarray, limit: float, keys: list[tuple]) -> bool:
    """One replicate through the procedure, read after each batch."""
    share = rules.sequence_share
    batch = 1 if share >= 1 else batch_size(pop.n, 256)
    seq = Sequential(pop, d, limit, rules.sequence_alpha, rules.discordance, rules.final_alpha)
    kind, at = decision(seq, rules.decision)
    scored = min(pop.n, -(-at // batch) * batch) if at <= pop.n else pop.n
    if seq.first("within", limit) <= scored:
        return True
    if scored < pop.n or rules.final_alpha is None or kind == "fail":
        return False
    base, cand = np.clip(d, 0, 1), np.clip(-d, 0, 1)  # base - cand = d
    return paired_test(base, cand, keys, 1 - rules.final_alpha).high < limit


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--share", type=float, default=None, help="the rules' sequence_share (default: the shipped rules')")
    args = ap.parse_args(argv)
    rules = load_rules(default_rules_path())
    if args.share is not None:
        rules = rules.model_copy(update={"sequence_share": args.share})
    rng, t0, rates = np.random.default_rng(20261206), time.perf_counter(), []
    for limit in LIMITS:
        for q in DISCORDANCE:
            for label, sizes in STRATA:
                rate = case(rng, rules, args.reps, limit, q, sizes)
                if np.isnan(rate):
                    continue
                rates.append(rate)
                print(f"limit {limit * 100:g} pt, discordance {q:g}, {label}, n={N[limit]}: false pass {rate:.4f} "
                      f"[{time.perf_counter() - t0:.0f} s]", flush=True)
    print(f"RESULT bench=sequential_size reps={args.reps} share={rules.sequence_share:g} cases={len(rates)} "
          f"alpha={rules.alpha:g} max_false_pass={max(rates):.4f} mean_false_pass={np.mean(rates):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
