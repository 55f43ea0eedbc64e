"""How many items `run --stop decided` scores, and how often it decides otherwise than the full run.

Replays the kept per-item MMLU scores of Qwen2.5-Coder-1.5B (14,042 items, H200): bf16 as the
baseline against fp8, awq, gptq, rtn, kv_fp8 (FP8 KV), the layer-skip FP8 and INT8 KV caches, and
the bf16 repeat of another day. Each candidate is replayed in `--orders` seeded orders
(stats.sequential.seeded_order, as the runner orders a task), looked at after every batch as the
runner does (`--batch`, by default the runner's: 1/128 of the task, 110 MMLU items). Per
check of the shipped rules (mmlu/acc, and mmlu/acc_macro over subjects, 2 pt each) the decision is
the confidence sequence's (stats.sequential.decision, the gate's) at the items scored: a pass shown,
else not; the full-data verdict is the gate's fixed-n paired test on all 14,042. A candidate's task
stops once both checks are decided (passed, shown beyond, futile) or at its last item.

    evalsuite results fetch h200-2026-12-01-qwen2.5-coder-1.5b h200-2026-11-30-qwen2.5-coder-1.5b
    .venv/bin/python bench/sequential_gate.py [--orders 1000] [--batch N]

Prints a line per candidate, then `RESULT bench=sequential_gate ...`: items_used_frac (the share of
items scored: up to the batch the decision was read after, and the one in hand then; over candidates
and orders), computed_frac (also the batch already sent, which the runner drops), kv_fp8_items_frac
(FP8 KV's share scored), wrong_decisions (candidates whose verdict, every check passed or not,
differs from the full data's, over candidates and orders: the gate's decision), and per check
wrong_checks (a check's pass or not differs from the full data's, over all checks and orders), of
them wrong_pass (passed, full data not) and not_shown (full data passes, the sequence did not:
futile, stopped with its candidate failed on another check, or run to the end, the price of looking
after every batch).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from evalsuite.verdict.rules import default_rules_path, load_rules
from evalsuite.results import kept_scores  # the pages' data, after `evalsuite results fetch PAGE`
from evalsuite.run.stopping import batch_size
from evalsuite.stats.sequential import Population, Sequential, decision, seeded_order
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


def replay(pop: Population, d: np.ndarray, limit: float, orders: list[np.ndarray], alpha: float,
           rule: str) -> tuple[np.ndarray, np.ndarray]:
    """Per order: items after which a pass is first shown (n + 1: never), and after which the check
    is first decided, whichever way (n + 1: never)."""
    passed, first = [], []
    for o in orders:
        seq = Sequential(Population(pop.weights[o], pop.cells[o], pop.sizes), d[o], limit, alpha)
        passed.append(seq.first("within", limit))
        first.append(decision(seq, rule)[1])
    return np.array(passed), np.array(first)


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
    used, computed, wrong, wrong_pass, not_shown, verdicts, per = [], [], [], [], [], [], {}
    for name, cand in variants.items():
        d = np.array([base[s]["value"] - cand[s]["value"] for s in ids])
        stops, calls = np.zeros(args.orders, int), []
        for metric, strata, limit in checks:
            keys = [tuple(str(base[s].get(k)) for k in strata) for s in ids]
            full = paired_test(np.clip(d, 0, 1), np.clip(-d, 0, 1), keys, rules.confidence)
            passed, first = replay(Population.of(keys), d, limit, orders, rules.alpha, rules.decision)
            stops = np.maximum(stops, np.minimum(first, len(ids)))
            calls.append((full.high < limit, passed))
        n = scored(stops, len(ids), batch)
        # at the items scored the gate passes a check whose pass the sequence has shown, else not
        shown = [(passed <= n, full_pass) for full_pass, passed in calls]
        wrong_checks = [s != f for s, f in shown]
        wrong += wrong_checks
        wrong_pass += [s & ~f for s, f in shown]
        not_shown += [~s & f for s, f in shown]
        verdicts.append(np.all([s for s, _ in shown], axis=0) != all(f for _, f in shown))
        used.append(n / len(ids))
        computed.append(scored(stops, len(ids), batch, ahead=2) / len(ids))
        per[name] = float(np.mean(n) / len(ids))
        print(f"{name}: full data {'/'.join('pass' if f else 'fail' for f, _ in calls)}; items used {per[name]:.3f} "
              f"(median {np.median(n) / len(ids):.3f}); passed {'/'.join(f'{np.mean(s):.3f}' for s, _ in shown)}; "
              f"wrong checks {np.mean(wrong_checks):.4f}, verdicts {np.mean(verdicts[-1]):.4f} "
              f"[{time.perf_counter() - t0:.0f} s]", flush=True)
    print(f"RESULT bench=sequential_gate orders={args.orders} batch={batch} candidates={len(variants)} "
          f"checks={len(checks)} items={len(ids)} items_used_frac={np.mean(used):.3f} computed_frac={np.mean(computed):.3f} "
          f"kv_fp8_items_frac={per['kv_fp8']:.3f} wrong_decisions={np.mean(verdicts):.4f} "
          f"wrong_checks={np.mean(wrong):.4f} wrong_pass={np.mean(wrong_pass):.4f} not_shown={np.mean(not_shown):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
