"""The gate's false-pass rate on stratified checks: a macro or balanced accuracy's drop at the limit.

bench/gate_size.py bounds the plain check exactly. A check on a metric that weighs strata (macro over
subjects, balanced over labels) takes Tango's bounds per stratum combined by MOVER
(stats.significance.tango_mover_test), which is asymptotic. Here paired 0/1 data are drawn with the
drop equal to the limit in every stratum (each item lost with probability q + L, gained with q) and
passed through the gate's own code path (paired_test with the strata, p_within(limit) < alpha), in
`reps` data sets per case: K strata of m items, the shipped limits, discordance q from none to a
high 15% each way. Cases: the CI config's CUAD (52 clauses, 2 labels, 10 pt), a few mid-sized
strata at 10 and 5 pt, and MMLU's 57 subjects at 2 pt (`--mmlu`, slower).

    .venv/bin/python bench/gate_size_strata.py [--reps 1000] [--mmlu]

Prints a row per case, then `RESULT bench=gate_size_strata alpha=... cases=... max_false_pass=...
at=K x m L q se=... over_alpha=... within_2se=...`: the cases whose rate is above alpha, and whether
the largest is within two standard errors of it (a simulation's tolerance, not the exact guarantee
the plain check has).
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from evalsuite.stats.significance import paired_test

CASES = [(2, 26, 0.10), (2, 60, 0.10), (5, 60, 0.10), (10, 30, 0.10), (2, 150, 0.05)]
MMLU = [(57, 14, 0.02), (57, 40, 0.02)]
QS = (0.0, 0.02, 0.05, 0.15)
ALPHA = 0.05


def false_pass(k: int, m: int, limit: float, q: float, reps: int, seed: int) -> float:
    """The share of `reps` data sets whose check passes where every stratum's true drop is `limit`."""
    keys = [(str(s),) for s in range(k) for _ in range(m)]
    rng = np.random.default_rng(seed)
    passed = 0
    for _ in range(reps):
        u = rng.random(k * m)
        base, cand = np.ones(k * m), np.ones(k * m)
        cand[u < q + limit] = 0.0  # lost
        base[(u >= q + limit) & (u < 2 * q + limit)] = 0.0  # gained
        passed += paired_test(base, cand, keys, 1 - ALPHA).p_within(limit) < ALPHA
    return passed / reps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--mmlu", action="store_true", help="also MMLU's 57 subjects at 2 pt (minutes per case)")
    a = ap.parse_args(argv)
    t0, rows = time.time(), []
    print("| strata x items | limit | q (each way) | false passes | ± se |")
    print("|---|---|---|---|---|")
    for i, (k, m, limit) in enumerate(CASES + (MMLU if a.mmlu else [])):
        for j, q in enumerate(QS):
            rate = false_pass(k, m, limit, q, a.reps, seed=100 * i + j)
            se = math.sqrt(max(rate * (1 - rate), ALPHA * (1 - ALPHA)) / a.reps)
            rows.append((rate, se, f"{k}x{m}", limit, q))
            print(f"| {k} x {m} | {limit * 100:g} pt | {q:.2f} | {rate:.4f} | {se:.4f} |", flush=True)
    rate, se, where, limit, q = max(rows)
    print(f"\n{a.reps:,} data sets a case; {time.time() - t0:.0f} s")
    print(f"RESULT bench=gate_size_strata alpha={ALPHA:g} cases={len(rows)} reps={a.reps} max_false_pass={rate:.4f} "
          f"at={where}@{limit * 100:g}pt,q={q:.2f} se={se:.4f} over_alpha={sum(r > ALPHA for r, *_ in rows)} "
          f"within_2se={rate <= ALPHA + 2 * se}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
