"""The false-pass rate of `run --stop decided`'s confidence sequence at a true drop equal to the limit.

Simulates paired items drawn i.i.d. from a superpopulation whose drop is exactly the limit (2 pt and
5 pt), at several discordance rates (the share of items that change), plain and stratified over
unequal strata (a macro mean), and looks after every item (a finer watch than the runner's batches).
A pass is the sequence's upper bound below the limit at any look up to N: its rate must stay at or
below alpha (0.05), which Ville's inequality promises (stats.sequential).

    .venv/bin/python bench/sequential_size.py [--reps 2000]

Prints a line per case, then `RESULT bench=sequential_size ... max_false_pass=...`.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from evalsuite.stats.sequential import Population, Sequential

ALPHA = 0.05
LIMITS = (0.02, 0.05)
DISCORDANCE = (0.05, 0.1, 0.3)
N = {0.02: 14042, 0.05: 1500}  # MMLU's items; a task of some that a 5 pt limit resolves
STRATA = (("plain", [1]), ("stratified", [10, 25, 60, 150, 400]))  # relative stratum sizes


def draws(rng: np.random.Generator, reps: int, n: int, drop: np.ndarray, q: float) -> np.ndarray:
    """reps x n paired drops: +1 (lost) or -1 (gained) at rates (q +- the item's stratum drop) / 2."""
    u = rng.random((reps, n))
    lost, gained = (q + drop) / 2, (q - drop) / 2
    return np.where(u < lost, 1.0, np.where(u < lost + gained, -1.0, 0.0))


def case(rng: np.random.Generator, reps: int, limit: float, q: float, sizes: list[int]) -> float:
    """The share of replicates in which the sequence ever shows the drop within the limit. Stratified,
    each stratum's drop differs (half the strata at 2x the limit, half near 0) with the macro mean
    at the limit: the item-level draws are then not alike."""
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
        seq = Sequential(Population(pop.weights[order], pop.cells[order], pop.sizes), d, limit, ALPHA)
        passes += int(np.sum(seq.first("within", limit) <= pop.n))
    return passes / reps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2000)
    args = ap.parse_args(argv)
    rng, t0, rates = np.random.default_rng(20261206), time.perf_counter(), []
    for limit in LIMITS:
        for q in DISCORDANCE:
            for label, sizes in STRATA:
                rate = case(rng, args.reps, limit, q, sizes)
                if np.isnan(rate):
                    continue
                rates.append(rate)
                print(f"limit {limit * 100:g} pt, discordance {q:g}, {label}, n={N[limit]}: false pass {rate:.4f} "
                      f"[{time.perf_counter() - t0:.0f} s]", flush=True)
    print(f"RESULT bench=sequential_size reps={args.reps} cases={len(rates)} alpha={ALPHA} "
          f"max_false_pass={max(rates):.4f} mean_false_pass={np.mean(rates):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
