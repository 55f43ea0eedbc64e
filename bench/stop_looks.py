"""What `run --stop decided` costs on the CPU after each batch: reading what the candidate recorded.

A run folder of the full MMLU's size (14,042 items by default, 57 subjects, each line with a 5-shot
prompt's length of text, as the runner records it) holds a baseline that ran whole; a candidate that
loses a few answers is appended batch by batch (the runner's batch under --stop decided: 110 items).
After each batch both readers give the checks' decisions (mmlu/acc and mmlu/acc_macro under the
shipped rules), and each is timed on its own:
- whole: a fresh read and validation of the whole samples file at every look (a cost that grows with
  the items recorded, so O(items^2) over a task);
- followed: the runner's reader (run.stopping.Watch), which validates only the lines appended since
  its last look.
They must agree at every look (`same_decisions`). Looks go on to the last batch, as they would for a
candidate that is never decided early, the worst case. On a GPU a 1.5B answers a batch of 110 MMLU
items in a fraction of a second, so a look that costs more leaves the card waiting.

    .venv/bin/python bench/stop_looks.py [--items 14042] [--prompt-chars 2400]

The last line printed: `RESULT bench=stop_looks items=... checks=... looks=... whole_s=... followed_s=...
speedup=... last_look_whole_ms=... last_look_followed_ms=... same_decisions=...`.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from evalsuite.core.rundir import RunDir
from evalsuite.core.types import Request, Sample, Score, VariantResult
from evalsuite.run.config import RunConfig
from evalsuite.run.stopping import Watch, batch_size, stop_policy
from evalsuite.stats.metrics import accuracy, by_group, macro_accuracy
from evalsuite.stats.paired import scored_items
from evalsuite.stats.sequential import seeded_order
from evalsuite.tasks import Task
from evalsuite.verdict.sequential import decisions

TASK, SEED = "mmlu", 0


def rows(ids: list[str], wrong: set[str], prompt: str) -> list[dict]:
    """Samples lines as the runner writes them: the sample with its prompt, the completion, the score."""
    out = []
    for sid in ids:
        group = sid.split("/")[0]
        value = 0.0 if sid in wrong else 1.0
        out.append({"sample": {"id": sid, "task": TASK, "request": {"prompt": prompt, "max_tokens": 1}, "target": "A",
                               "choices": ["A", "B", "C", "D"], "group": group},
                    "completion": {"text": " A" if value else " B"},
                    "score": {"sample_id": sid, "task": TASK, "value": value, "pred": "A" if value else "B",
                              "target": "A", "group": group}})
    return out


def baseline(rd: RunDir, ids: list[str], prompt: str) -> None:
    rd.append_samples("bf16", TASK, rows(ids, set(), prompt))
    scores = [Score(sample_id=s, task=TASK, value=1.0, pred="A", target="A", group=s.split("/")[0]) for s in ids]
    rd.write_result(VariantResult(variant="bf16", status="ok", metrics=[
        accuracy(scores, "mmlu/acc"), macro_accuracy(by_group(scores), "mmlu/acc_macro")]))


class Mmlu(Task):
    name, harness, timed_alone = TASK, False, False


def looks(rd: RunDir, watch: Watch, order: list[str], wrong: set[str], prompt: str, batch: int):
    """(seconds reading whole, seconds following, last look's each, whether every look agreed)."""
    whole_s = followed_s = last_whole = last_followed = 0.0
    same = True
    for at in range(batch, len(order) + batch, batch):
        rd.append_samples("cand", TASK, rows(order[at - batch:at], wrong, prompt))
        t0 = time.perf_counter()
        whole = decisions(watch.policy.rules, watch.found, scored_items(rd.load_samples("cand", TASK)))
        t1 = time.perf_counter()
        followed = decisions(watch.policy.rules, watch.found, watch.recorded())
        t2 = time.perf_counter()
        last_whole, last_followed = t1 - t0, t2 - t1
        whole_s, followed_s, same = whole_s + last_whole, followed_s + last_followed, same and whole == followed
    return whole_s, followed_s, last_whole, last_followed, same


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=14042)
    ap.add_argument("--prompt-chars", type=int, default=2400, help="a 5-shot MMLU prompt is about 2,400 characters")
    args = ap.parse_args(argv)
    ids = [f"subject{i % 57}/test/{i}" for i in range(args.items)]
    order = seeded_order(ids, SEED, TASK)
    wrong = set(random.Random(SEED).sample(ids, args.items // 50))  # a 2-point loss: near the limit, decided late
    prompt = "x" * args.prompt_chars
    with tempfile.TemporaryDirectory() as tmp:
        rd = RunDir(Path(tmp) / "run")
        baseline(rd, order, prompt)
        cfg = RunConfig.model_validate({"model": {"path": "m"}, "variants": {"bf16": {}, "cand": {}},
                                        "baseline": "bf16", "stop": "decided", "seed": SEED})
        items = [Sample(id=i, task=TASK, request=Request(prompt=prompt), target="A") for i in order]
        watch = stop_policy(cfg).start_task(rd, "cand", Mmlu(), items)
        if not isinstance(watch, Watch):
            print("the shipped rules do not watch this task", file=sys.stderr)
            return 1
        batch = batch_size(args.items, 256)
        whole_s, followed_s, last_whole, last_followed, same = looks(rd, watch, order, wrong, prompt, batch)
    print(f"RESULT bench=stop_looks items={args.items} checks={len(watch.found)} looks={-(-args.items // batch)} batch={batch} "
          f"whole_s={whole_s:.2f} followed_s={followed_s:.2f} speedup={whole_s / max(followed_s, 1e-9):.1f} "
          f"last_look_whole_ms={last_whole * 1000:.1f} last_look_followed_ms={last_followed * 1000:.1f} "
          f"same_decisions={int(same)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
