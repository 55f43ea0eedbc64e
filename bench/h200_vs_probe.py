"""Check an evalsuite H200 run against a raw vLLM probe of the same card and shapes.

Usage: python bench/h200_vs_probe.py RUN_DIR
Compares, per variant: weights GiB and KV capacity (must match the probe), TTFT and ITL at
130K tokens (within 5%: the suite's overhead), and the planner's predictions. The probe numbers
below are a bare `vllm.LLM` script's (H200, vLLM 0.26.0, Llama-3.1-8B shape, dummy weights, one
130K prompt, measured 2026-11-29): they hold for that card and vLLM version only.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from evalsuite.core.rundir import RunDir

# variant: (weights GiB from vLLM's log, KV capacity tokens, TTFT s at 130K, ITL ms at 130K)
PROBE = {
    "bf16": (15.0, 914_304, 10.31, 9.28),
    "fp8": (8.54, 967_200, 9.29, 7.23),
    "kv_fp8": (15.04, 1_828_096, 9.23, 8.05),
    "fp8_kv_fp8": (8.54, 1_934_400, 8.21, 6.85),
    "awq_int4": (5.49, 992_512, 9.44, 8.08),
}
CTX = 130000


def pct(a: float, b: float) -> float:
    return (a / b - 1) * 100


def main(run: Path) -> None:
    record = RunDir(run).load_run()
    print("| variant | weights GiB (suite / probe log) | KV tokens (suite / probe) | planner KV err % | "
          "TTFT 130K s (suite / probe, diff %) | ITL 130K ms (suite / probe, diff %) |")
    print("|---|---|---|---|---|---|")
    worst_ttft = worst_itl = worst_kv = worst_plan = 0.0
    for v in record.variants:
        if v.variant not in PROBE or v.status != "ok":
            continue
        w, kv, ttft, itl = PROBE[v.variant]
        m = {x.name: x.value for x in v.metrics}
        s_ttft = m[f"latency/ttft_ms_p50/ctx{CTX}"] / 1000
        s_itl = m[f"latency/itl_ms_p50/ctx{CTX}"]
        plan_kv = v.predicted.kv_capacity_tokens if v.predicted is not None else None
        plan_err = pct(plan_kv, v.engine.kv_cache_tokens) if plan_kv else float("nan")
        worst_kv = max(worst_kv, abs(pct(v.engine.kv_cache_tokens, kv)))
        worst_plan = max(worst_plan, abs(plan_err))
        worst_ttft, worst_itl = max(worst_ttft, abs(pct(s_ttft, ttft))), max(worst_itl, abs(pct(s_itl, itl)))
        print(f"| {v.variant} | {v.engine.weights_gib:.2f} / {w:.2f} | {v.engine.kv_cache_tokens:,} / {kv:,} | "
              f"{plan_err:+.3f} | {s_ttft:.2f} / {ttft:.2f} ({pct(s_ttft, ttft):+.1f}) | "
              f"{s_itl:.2f} / {itl:.2f} ({pct(s_itl, itl):+.1f}) |")
    print(f"RESULT bench=h200_vs_probe variants={len(record.variants)} max_kv_diff_pct={worst_kv:.3f} "
          f"max_planner_kv_err_pct={worst_plan:.3f} max_ttft_diff_pct={worst_ttft:.1f} max_itl_diff_pct={worst_itl:.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="an evalsuite run folder of the probe's variants on an H200")
    main(parser.parse_args().run_dir)
