"""The gate's size: how often it passes a candidate whose true drop equals the limit.

For each shipped points limit (the rules' `max_drop_points` and per-task limits) and n (the fewest
items whose exact bound can pass anything, the items `gate --plan` asks for at the rules'
discordance, and the n Tango's asymptotic bound first resolved), paired 0/1 data are drawn at a
true drop equal to the limit: each item lost with probability q + L and gained with probability q,
over a grid of discordance rates q (the nuisance, over its whole range: 0 to (1 - L) / 2). Two
computations of P(pass):

  exact     the pass region of the gate's own test (evalsuite.stats.exact: for each count of gains,
            the most losses that still pass), summed under the trinomial law: no sampling error.
  simulate  `reps` random data sets per limit at the worst q, through the gate's code path
            (evalsuite.stats.significance.paired_test, p_within(limit) < alpha); each one it passes
            must lie in the exact pass region, so the region's rate is the gate's (its own rate
            carries the simulation's sampling error, printed beside it).

Beside each, the same for Tango's asymptotic score bound (the gate's test before): it passed 6.8%,
6.9% and 7.2% at the 2, 5 and 10 pt limits' smallest resolvable n. The exact test maximises its p
over q, so its size holds at every q (the RESULT's max_false_pass, which must stay <= alpha).

    .venv/bin/python bench/gate_size.py [--rules FILE] [--reps 1000] [--q-points 101]

The last line printed is the RESULT line.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy.special import bdtr
from scipy.stats import binom, norm

from evalsuite.verdict.rules import default_rules_path, load_rules
from evalsuite.stats import exact
from evalsuite.stats.significance import items_needed, paired_test


def shipped_limits(rules) -> list[float]:
    """Every points limit the rules ship, in score units."""
    out = set()
    for r in rules.rules:
        if r.spec.per_item:
            out |= {r.limit / 100, *(v / 100 for v in r.tasks.values())}
    return sorted(x for x in out if x > 0)


def _largest_passing(passes, c: int, n: int) -> int:
    """The most losses b (with c gains) that `passes`, -1 if none; passing falls as b rises."""
    if not passes(0, c):
        return -1
    lo, hi = 0, n - c
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if passes(mid, c) else (lo, mid - 1)
    return lo


def pass_boundary(n: int, limit: float, confidence: float, c_max: int, method: str) -> np.ndarray:
    """r[c] for c = 0..c_max: the most losses that pass with c gains. `exact`: the gate's exact p
    against the limit (p < alpha; the printed bound can only pass less, so the size found is an upper
    bound of the gate's); `tango`: Tango's score statistic below -z."""
    alpha, z = 1 - confidence, float(norm.ppf(confidence))
    if method == "exact":
        passes = lambda b, c: exact.p_at_least(b, c, n, limit) < alpha  # noqa: E731
    else:
        passes = lambda b, c: float(exact.tango_vec(np.array([b]), np.array([c]), n, limit)[0]) < -z  # noqa: E731
    return np.array([_largest_passing(passes, c, n) for c in range(c_max + 1)])


def pass_probability(r: np.ndarray, n: int, limit: float, q: float) -> float:
    """P(pass) with p01 = q, p10 = q + limit: sum over gains c of P(c) P(losses <= r[c] | c)."""
    c = np.arange(len(r))
    p_loss = (q + limit) / (1 - q) if q < 1 else 0.0
    inside = np.where(r >= 0, bdtr(np.maximum(r, 0), n - c, min(p_loss, 1.0)), 0.0)
    return float(np.sum(binom.pmf(c, n, q) * inside))


def simulate(n: int, limit: float, q: float, reps: int, confidence: float, r: np.ndarray,
             seed: int = 0) -> tuple[float, int]:
    """(the share of `reps` data sets the gate's own code path passes, the data sets on which it
    passes where the exact pass region does not): the region's rate holds the gate's where that is 0."""
    rng = np.random.default_rng(seed)
    rest = max(0.0, 1 - 2 * q - limit)  # 0 at the range's end, where float rounding can go below
    counts = rng.multinomial(n, np.array([q + limit, q, rest]) / (1 + rest - (1 - 2 * q - limit)), size=reps)
    passed = beyond = 0
    for b, c, _ in counts:
        base = np.array([1.0] * b + [0.0] * c + [1.0] * (n - b - c))
        cand = np.array([0.0] * b + [1.0] * c + [1.0] * (n - b - c))
        ok = paired_test(base, cand, None, confidence).p_within(limit) < 1 - confidence
        passed += ok
        beyond += ok and not (c < len(r) and b <= r[c])
    return passed / reps, beyond


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rules", type=Path, default=default_rules_path())
    ap.add_argument("--reps", type=int, default=1000, help="simulated data sets per limit and n, at the worst q")
    ap.add_argument("--q-points", type=int, default=101, help="discordance rates q from 0 to (1 - limit) / 2")
    a = ap.parse_args()
    rules = load_rules(a.rules)
    conf, alpha = rules.confidence, rules.alpha
    t0 = time.time()
    worst, worst_tango, worst_sim, outside, cells = 0.0, 0.0, 0.0, 0, []
    print("| limit | n | why this n | exact test: max P(pass) [at q] | Tango's bound: max P(pass) [at q] | simulated (gate's path) |")
    print("|---|---|---|---|---|---|")
    for limit in shipped_limits(rules):
        qs = np.linspace(0.0, (1 - limit) / 2, a.q_points)
        z2 = float(norm.ppf(conf)) ** 2
        sizes = {exact.floor_items(limit, conf): "smallest n the exact test resolves",
                 items_needed(limit, rules.discordance, conf, rules.power): f"`gate --plan` at {rules.discordance:.0%} discordance",
                 int(np.ceil(z2 * (1 - limit) / limit)): "smallest n Tango's bound resolved"}
        for n, why in sorted(sizes.items()):
            c_max = n
            r_exact = pass_boundary(n, limit, conf, c_max, "exact")
            r_tango = pass_boundary(n, limit, conf, c_max, "tango")
            pe = np.array([pass_probability(r_exact, n, limit, q) for q in qs])
            pt = np.array([pass_probability(r_tango, n, limit, q) for q in qs])
            q_star = float(qs[int(pe.argmax())])
            sim, beyond = simulate(n, limit, q_star, a.reps, conf, r_exact) if a.reps else (float("nan"), 0)
            worst, worst_tango = max(worst, float(pe.max())), max(worst_tango, float(pt.max()))
            worst_sim, outside = max(worst_sim, sim), outside + beyond
            cells.append(f"{limit * 100:g}pt@{n}")
            se = np.sqrt(pe.max() * (1 - pe.max()) / a.reps) if a.reps else float("nan")
            print(f"| {limit * 100:g} pt | {n:,} | {why} | {pe.max():.4f} [q={q_star:.4f}] | {pt.max():.4f} "
                  f"[q={float(qs[int(pt.argmax())]):.4f}] | {sim:.4f} ± {se:.4f} ({a.reps:,} at q={q_star:.4f}; "
                  f"{beyond} passed outside the exact region) |")
            sys.stdout.flush()
    print(f"\nalpha {alpha:g}; q from 0 to (1 - limit) / 2 in {a.q_points} points; {time.time() - t0:.0f} s")
    print(f"RESULT bench=gate_size alpha={alpha:g} cells={','.join(cells)} max_false_pass={worst:.4f} "
          f"tango_max_false_pass={worst_tango:.4f} simulated_max_false_pass={worst_sim:.4f} "
          f"passed_outside_region={outside} held={worst <= alpha and outside == 0}")
    return 0 if worst <= alpha and outside == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
