"""How many items `run --stop decided` scores, and how often it decides otherwise than the full run.

Replays the kept per-item MMLU scores of Qwen2.5-Coder-1.5B (14,042 items, H200): bf16 as the
baseline against fp8, awq, gptq, rtn, kv_fp8 (FP8 KV), the layer-skip FP8 and INT8 KV caches, and
the bf16 repeat of another day. Each candidate is replayed in `--orders` seeded orders
(stats.sequential.seeded_order, as the runner orders a task), looked at after every batch as the
runner does (`--batch`, by default the runner's: 1/128 of the task, 110 MMLU items). Per
check of the shipped rules (mmlu/acc, and mmlu/acc_macro over subjects, 2 pt each) the decision is
the sequential test's (report/sequential.py's, the gate's) at the items scored, and the full-data
verdict the gate's paired test on all 14,042. A candidate's task stops once both checks are decided.

    evalsuite results fetch h200-2026-12-01-qwen2.5-coder-1.5b h200-2026-11-30-qwen2.5-coder-1.5b
    .venv/bin/python bench/sequential_gate.py [--orders 1000] [--batch N]

Prints a line per candidate, then `RESULT bench=sequential_gate ...`: items_used_frac (the share of
items scored: up to the batch the decision was read after, and the one in hand then; over candidates
and orders), computed_frac (also the batch already sent, which the runner drops), kv_fp8_items_frac
(FP8 KV's share scored), wrong_decisions (checks decided otherwise than on full data, over all checks
and orders) and wrong_verdicts (candidates whose verdict differs).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from evalsuite.report.rules import default_rules_path, load_rules
from evalsuite.results import kept_scores  # the pages' data, after `evalsuite results fetch PAGE`
from evalsuite.run.stopping import batch_size
from evalsuite.stats.sequential import Population, Sequential, seeded_order
from evalsuite.stats.significance import paired_test

PAGE, REPEAT_PAGE = "h200-2026-12-01-qwen2.5-coder-1.5b", "h200-2026-11-30-qwen2.5-coder-1.5b"
CANDIDATES = {"fp8": "fp8", "awq": "awq", "gptq": "gptq", "rtn": "rtn", "kv_fp8": "kv_fp8",
              "kv_fp8_skip_layers": "kv_fp8_skip_layers_0_1_triton_attn", "kv_int8": "kv_int8_per_token_head"}
TASK = "mmlu"
METRICS = ("mmlu/acc", "mmlu/acc_macro")  # the 1.5B page's gated MMLU metrics


def gated() -> list[tuple[str, list[str], float]]:
    """(metric, strata, limit in score units) of the shipped rules for the page's MMLU metrics; a rule
    without strata weighs items as the metric does (acc alike, acc_macro by subject)."""
    rules, out = load_rules(default_rules_path()), []
    for name in METRICS:
        rule = rules.rule_for(name)
        if rule is not None and rule.kind == "max_drop_points":
            out.append((name, rule.strata or (["group"] if name.endswith("_macro") else []), rule.limit_for(name) / 100))
    return out


def replay(pop: Population, d: np.ndarray, limit: float, orders: list[np.ndarray], confidence: float,
           alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per order: items after which the full run's pass is first shown, and a drop beyond the limit."""
    passed, failed = [], []
    for o in orders:
        seq = Sequential(Population(pop.weights[o], pop.cells[o], pop.sizes), d[o], confidence, limit)
        passed.append(seq.first("within", limit, alpha))
        failed.append(seq.first("above", limit, alpha))
    return np.array(passed), np.array(failed), np.minimum(passed, failed)


def scored(decided_at: np.ndarray, n: int, batch: int, ahead: int = 1) -> np.ndarray:
    """Items scored when the runner stops (the batches up to the decision, and the one it had in hand
    then); with ahead=2, the batch already sent too, which it drops."""
    return np.minimum(n, (np.ceil(decided_at / batch) + ahead) * batch).astype(int)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=0, help="items a batch (default: the runner's under --stop decided)")
    args = ap.parse_args(argv)
    rules = load_rules(default_rules_path())
    kept = kept_scores(PAGE, "scores", ("bf16", *CANDIDATES.values()))
    base = kept["bf16"][TASK]
    ids = sorted(base)
    batch = args.batch or batch_size(len(ids), 256)
    checks = gated()
    variants = {name: kept[folder][TASK] for name, folder in CANDIDATES.items()}
    variants["bf16_repeat"] = kept_scores(REPEAT_PAGE, "scores", ("bf16",))["bf16"][TASK]
    t0 = time.perf_counter()
    index = {s: i for i, s in enumerate(ids)}
    orders = [np.array([index[s] for s in seeded_order(ids, seed, TASK)]) for seed in range(args.orders)]
    used, computed, wrong, verdicts, per = [], [], [], [], {}
    for name, cand in variants.items():
        d = np.array([base[s]["value"] - cand[s]["value"] for s in ids])
        stops, calls = np.zeros(args.orders, int), []
        for metric, strata, limit in checks:
            keys = [tuple(str(base[s].get(k)) for k in strata) for s in ids]
            full = paired_test(np.clip(d, 0, 1), np.clip(-d, 0, 1), keys, rules.confidence)
            verdict = "pass" if full.high < limit else "fail"
            passed, failed, first = replay(Population.of(keys), d, limit, orders, rules.confidence, rules.alpha)
            stops = np.maximum(stops, first)
            calls.append((verdict, passed, failed))
        n = scored(stops, len(ids), batch)
        early = stops <= len(ids)
        # at the items scored the gate passes a check whose pass was shown, else fails it; run whole, it
        # judges on full data, which is the verdict by definition
        wrong_checks = [early & (np.where(passed <= n, "pass", "fail") != verdict) for verdict, passed, _ in calls]
        wrong += wrong_checks
        verdicts.append(np.any(wrong_checks, axis=0))
        used.append(n / len(ids))
        computed.append(scored(stops, len(ids), batch, ahead=2) / len(ids))
        per[name] = (float(np.mean(n) / len(ids)), [v for v, _, _ in calls])
        print(f"{name}: full data {'/'.join(v for v, _, _ in calls)}; items used {per[name][0]:.3f} "
              f"(median {np.median(n) / len(ids):.3f}); wrong {np.mean(wrong_checks):.4f} "
              f"[{time.perf_counter() - t0:.0f} s]", flush=True)
    print(f"RESULT bench=sequential_gate orders={args.orders} batch={batch} candidates={len(variants)} "
          f"checks={len(checks)} items={len(ids)} items_used_frac={np.mean(used):.3f} computed_frac={np.mean(computed):.3f} "
          f"kv_fp8_items_frac={per['kv_fp8'][0]:.3f} wrong_decisions={np.mean(wrong):.4f} "
          f"wrong_verdicts={np.mean(verdicts):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
