"""How many items `run --stop decided` scores, and how often it decides otherwise than the full run.

Replays the kept per-item scores of Qwen2.5-Coder-1.5B (H200), every task of every kept run folder of
the page (PARTS): MMLU (14,042 items) and CUAD (13,028; balanced accuracy by task and answer) of the
32K run, needles and legal_long per length (32K and 128K runs), RULER per length (132 items a length
at 4K-32K, 64K and 128K), each folder's candidates against its own bf16, and on MMLU the bf16 repeat
of another day. Each candidate is replayed in `--orders` seeded orders (stats.sequential.seeded_order,
as the runner orders a task), looked at after every batch as the runner does (`--batch`, by default
the runner's: 1/128 of the task, at least 32 items). The procedure is the product's
(verdict/sequential.py): a task is watched only where every check on it is one the confidence
sequence resolves at the planning discordance, else it runs whole and is judged fixed-n (not
replayed: the same verdict by construction); a watched check passes where the sequence (at
`sequence_share` of alpha) shows it by the items scored, or, for a task run to its last item, where
the fixed-n test on all of them (at the rest of alpha) does; a check decided beyond its limit is not
passed. The full-data verdict is the gate's fixed-n paired test on all items at alpha.

    evalsuite results fetch h200-2026-12-01-qwen2.5-coder-1.5b h200-2026-11-30-qwen2.5-coder-1.5b
    .venv/bin/python bench/sequential_gate.py [--orders 1000] [--batch N] [--parts scores ...] [--scores DIR]

`--scores DIR` reads a kept folder (variant/task.scores.jsonl.gz, as `evalsuite export` writes)
instead of the page. Prints a line per folder, task and candidate, then `RESULT
bench=sequential_gate ...`: candidates (candidate-task replays), watched (those whose task the
sequence watched), fast_fails_slow_pass (of the replays whose every check the full data pass, the
share `--stop decided` does not pass), fast_passes_slow_fails (the other way),
ruler_fast_fails_slow_pass, items_used_frac (MMLU's share of items scored, up to the batch the
decision was read after and the one in hand then), computed_frac (also the batch already sent, which
the runner drops), kv_fp8_items_frac, wrong_decisions (MMLU candidates whose verdict differs from the
full data's), and per MMLU check wrong_checks, wrong_pass (passed, full data not) and not_shown (full
data passes, the fast path does not).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evalsuite.results import kept_scores  # the pages' data, after `evalsuite results fetch PAGE`
from evalsuite.results.scores import read_kept
from evalsuite.run.stopping import batch_size
from evalsuite.stats.sequential import Population, Sequential, decision, floor, planned_bound, seeded_order
from evalsuite.stats.significance import paired_test
from evalsuite.verdict.rules import Rules, default_rules_path, load_rules

PAGE, REPEAT_PAGE = "h200-2026-12-01-qwen2.5-coder-1.5b", "h200-2026-11-30-qwen2.5-coder-1.5b"
CANDIDATES = {"fp8": "fp8", "awq": "awq", "gptq": "gptq", "rtn": "rtn", "kv_fp8": "kv_fp8",
              "kv_fp8_skip_layers": "kv_fp8_skip_layers_0_1_triton_attn", "kv_int8": "kv_int8_per_token_head"}
MMLU, RULER = "mmlu", "ruler"
CHOICE = (MMLU, "legal")  # the page's choice tasks; the others are grids of lengths (needle, legal_long, RULER)
TASKS = (MMLU, "legal", "needle", "needle_multikey", "legal_long", "legal_long_multi", RULER)
# the page's kept run folders: the 32K accuracy run, the 128K one, RULER 4K-32K, 64K and 128K
PARTS = ("scores", "scores-128k", "scores-ruler", "scores-ruler-64k", "scores-ruler-128k")


@dataclass
class Check:
    metric: str
    ids: list[str]  # the baseline's items behind it
    strata: list[str]
    limit: float


def grid_checks(rules: Rules, base: dict[str, dict], task: str) -> list[Check]:
    """A grid task's whole-task check and one per length, as the task names them (ruler/score/len4096,
    needle/acc/len32000), with the strata and limits of the rules."""
    head = "score" if task == RULER else "acc"
    lengths = sorted({r["extra"]["length"] for r in base.values()})
    out = []
    for name, ids in [(f"{task}/{head}", sorted(base))] + [
            (f"{task}/{head}/len{n}", sorted(s for s, r in base.items() if r["extra"]["length"] == n)) for n in lengths]:
        rule = rules.rule_for(name)
        if rule is not None and rule.spec.per_item:
            out.append(Check(name, ids, rule.strata, rule.limit_for(name) / 100))
    return out


def choice_checks(rules: Rules, base: dict[str, dict], task: str) -> list[Check]:
    """A choice task's gated metrics: acc, and MMLU's macro accuracy (by subject) or CUAD's balanced
    accuracy (by task and answer), with the strata of the rules."""
    names = (f"{task}/acc", f"{task}/acc_macro") if task == MMLU else (f"{task}/balanced_acc", f"{task}/acc")
    out = []
    for name in names:
        rule = rules.rule_for(name)
        if rule is not None and rule.spec.per_item:
            strata = rule.strata or (["group"] if name.endswith("_macro") else [])
            out.append(Check(name, sorted(base), strata, rule.limit_for(name) / 100))
    return out


def checks_of(rules: Rules, base: dict[str, dict], task: str) -> list[Check]:
    return (choice_checks if task in CHOICE else grid_checks)(rules, base, task)


def watched(rules: Rules, pop: Population, limit: float) -> bool:
    """verdict.sequential._check's test: may the sequence decide this check (else the task runs whole)."""
    if pop.n < rules.min_n:
        return False
    alpha = rules.sequence_alpha
    return floor(pop, limit, alpha) < limit and planned_bound(pop, limit, alpha, rules.discordance) < limit


def replay(rules: Rules, pop: Population, d: np.ndarray, limit: float, orders: list[np.ndarray]):
    """Per order: items after which a pass is first shown (n + 1: never), after which the check is
    first decided (n + 1: never), and whether that first decision is a fail shown beyond the limit."""
    passed, first, beyond = [], [], []
    for o in orders:
        seq = Sequential(Population(pop.weights[o], pop.cells[o], pop.sizes), d[o], limit, rules.sequence_alpha,
                         rules.discordance, rules.final_alpha)
        passed.append(seq.first("within", limit))
        kind, at = decision(seq, rules.decision)
        first.append(at)
        beyond.append(kind == "fail")
    return np.array(passed), np.array(first), np.array(beyond)


def scored(decided_at: np.ndarray, n: int, batch: int, ahead: int = 1) -> np.ndarray:
    """Items scored when the runner stops (the batches up to the decision, and the one it had in hand
    then); with ahead=2, the batch already sent too, which it drops."""
    return np.minimum(n, (np.ceil(decided_at / batch) + ahead) * batch).astype(int)


def task_replay(rules: Rules, task: str, checks: list[Check], base: dict[str, dict], cand: dict[str, dict],
                seeds: int, batch_override: int) -> dict:
    """One candidate's task in `seeds` orders: per check the full data's pass and the fast path's,
    and the items scored."""
    ids = sorted(base)
    total, slow_alpha, final = len(ids), rules.confidence, 1 - (rules.final_alpha or 0)
    batch = batch_override or batch_size(total, 256)
    order_all = [seeded_order(ids, seed, task) for seed in range(seeds)]
    prepared = []
    for check in checks:
        keys = [tuple(str(base[s].get(k)) for k in check.strata) for s in check.ids]
        b = np.array([base[s]["value"] for s in check.ids])
        c = np.array([cand[s]["value"] for s in check.ids])
        slow = paired_test(b, c, keys, slow_alpha).high < check.limit
        last_look = rules.final_alpha is not None and paired_test(b, c, keys, final).high < check.limit
        prepared.append((check, keys, b - c, slow, last_look, Population.of(keys)))
    out = {"slow": [p[3] for p in prepared], "total": total, "batch": batch, "metrics": [p[0].metric for p in prepared]}
    if not all(watched(rules, pop, check.limit) for check, *_, pop in prepared):
        # a check the sequence cannot resolve: the task runs whole, judged fixed-n at alpha as without --stop
        n = np.full(seeds, total)
        return {**out, "fast": [np.full(seeds, p[3]) for p in prepared], "n": n, "computed": n, "whole": True}
    calls, stops = [], np.zeros(seeds, int)
    for check, _, d, slow, last_look, pop in prepared:
        mine = {s: i for i, s in enumerate(check.ids)}
        # the check's items in each order: the task's order restricted to them, as the runner scores them
        orders = [np.array([mine[s] for s in o if s in mine]) for o in order_all]
        at_task = [np.array([i for i, s in enumerate(o) if s in mine]) for o in order_all]  # their places in the task
        passed, first, beyond = replay(rules, pop, d, check.limit, orders)
        # items of the task scored when this check is decided (n + 1: never)
        pos = np.array([a[f - 1] + 1 if f <= len(a) else total + 1 for a, f in zip(at_task, first, strict=True)])
        pass_pos = np.array([a[p - 1] + 1 if p <= len(a) else total + 1 for a, p in zip(at_task, passed, strict=True)])
        stops = np.maximum(stops, np.minimum(pos, total))
        calls.append((last_look, pass_pos, beyond))
    n = scored(stops, total, batch)
    shown = [(pass_pos <= n) | ((n >= total) & last & ~beyond) for last, pass_pos, beyond in calls]
    return {**out, "fast": shown, "n": n, "computed": scored(stops, total, batch, ahead=2), "whole": False}


def load(args) -> list[tuple[str, str, dict, dict[str, dict]]]:
    """(label, task, baseline's items, candidate -> items) per run folder and task: every task of
    every kept run folder of the page (PARTS; `--parts` picks some) and the bf16 repeat of another
    day on MMLU, or of `--scores`."""
    out = []
    if args.scores:
        folders = [(Path(args.scores).name, read_kept(Path(args.scores)))]
    else:
        folders = [(part, kept_scores(PAGE, part)) for part in (args.parts or PARTS)]
    for label, kept in folders:
        for task in TASKS:
            if task in kept.get("bf16", {}):
                cands = {v: t[task] for v, t in kept.items() if v != "bf16" and task in t}
                if task == MMLU and label == "scores" and not args.scores:
                    cands["bf16_repeat"] = kept_scores(REPEAT_PAGE, "scores", ("bf16",))["bf16"][MMLU]
                out.append((f"{label}/{task}", task, kept["bf16"][task], cands))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=0, help="items a batch (default: the runner's under --stop decided)")
    ap.add_argument("--scores", default="", help="a kept scores folder to read instead of the page")
    ap.add_argument("--parts", nargs="*", choices=PARTS, default=None,
                    help="the page's kept run folders to replay (default: all of them)")
    ap.add_argument("--share", type=float, default=None, help="the rules' sequence_share (default: the shipped rules')")
    args = ap.parse_args(argv)
    rules = load_rules(default_rules_path())
    if args.share is not None:
        rules = rules.model_copy(update={"sequence_share": args.share})
    data, t0 = load(args), time.perf_counter()
    units, per_check, mmlu, per = [], [], [], {}
    for label, task, base, variants in data:
        for name, cand in variants.items():
            both = {s: row for s, row in base.items() if s in cand}  # paired on the items both answered, as the gate
            r = task_replay(rules, task, checks_of(rules, both, task), both, cand, args.orders, args.batch)
            slow_pass = all(r["slow"])
            fast_pass = np.all(r["fast"], axis=0)
            units.append((task, slow_pass, fast_pass, r["whole"]))
            per_check += [(task, s, f) for s, f in zip(r["slow"], r["fast"], strict=True)]
            if task == MMLU:
                mmlu.append(r)
                per[name] = float(np.mean(r["n"]) / r["total"])
            print(f"{label} {name}: full data {'/'.join('pass' if s else 'fail' for s in r['slow'])}; "
                  f"{'runs whole (a check the sequence cannot resolve)' if r['whole'] else 'watched'}; items used "
                  f"{np.mean(r['n']) / r['total']:.3f}; passed {'/'.join(f'{np.mean(f):.3f}' for f in r['fast'])}; "
                  f"verdict differs {np.mean(fast_pass != slow_pass):.4f} [{time.perf_counter() - t0:.0f} s]", flush=True)
    print(result_line(args, rules, units, per_check, mmlu, per))
    return 0


def _rate(xs: list[np.ndarray]) -> float:
    return float(np.mean(np.concatenate(xs))) if xs else float("nan")


def result_line(args, rules: Rules, units: list, per_check: list, mmlu: list[dict], per: dict) -> str:
    good = [~fast for _, slow, fast, _ in units if slow]
    good_ruler = [~fast for task, slow, fast, _ in units if slow and task == RULER]
    bad = [fast for _, slow, fast, _ in units if not slow]
    watched = sum(not whole for *_, whole in units)
    checks = [(s, f) for task, s, f in per_check if task == MMLU]
    wrong = [s != f for s, f in checks]
    wrong_pass = [f & ~s for s, f in checks]
    not_shown = [~f & s for s, f in checks]
    wrong_decisions = [fast != slow for task, slow, fast, _ in units if task == MMLU]
    batch = mmlu[0]["batch"] if mmlu else 0
    items = mmlu[0]["total"] if mmlu else 0
    used = _rate([r["n"] / r["total"] for r in mmlu])
    computed = _rate([r["computed"] / r["total"] for r in mmlu])
    return (f"RESULT bench=sequential_gate orders={args.orders} batch={batch} share={rules.sequence_share:g} "
            f"candidates={len(units)} watched={watched} items={items} fast_fails_slow_pass={_rate(good):.4f} "
            f"fast_passes_slow_fails={_rate(bad):.4f} ruler_fast_fails_slow_pass={_rate(good_ruler):.4f} "
            f"items_used_frac={used:.3f} computed_frac={computed:.3f} kv_fp8_items_frac={per.get('kv_fp8', float('nan')):.3f} "
            f"wrong_decisions={_rate(wrong_decisions):.4f} wrong_checks={_rate(wrong):.4f} "
            f"wrong_pass={_rate(wrong_pass):.4f} not_shown={_rate(not_shown):.4f}")


if __name__ == "__main__":
    sys.exit(main())
