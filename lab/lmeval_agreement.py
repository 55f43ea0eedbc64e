"""lm-eval's answers (a bench/mmlu_vs_lmeval.py work folder whose lm-eval side finished) against the
per-item MMLU scores of an evalsuite run of the same model (`evalsuite export`), matched
item by item through the question rows the bench wrote for lm-eval.

    python lab/lmeval_agreement.py WORK_DIR SCORES_DIR/VARIANT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from evalsuite.data.assets import default_cache_dir
from evalsuite.results.scores import read_rows
from evalsuite.stats.significance import wilson
from evalsuite.tasks.base import TaskContext
from evalsuite.tasks.spec import ChoiceConfig, open_rows

LETTERS = "ABCD"


def main(work: Path, scores: Path) -> None:
    ours = {r["sample_id"]: r for r in read_rows(scores / "mmlu.scores.jsonl.gz")}
    ctx = TaskContext(base_dir=Path.cwd(), cache_dir=default_cache_dir(), seed=0, tokenizer=None, max_model_len=4096)
    _, load, _ = open_rows(ChoiceConfig(type="mmlu"), ctx)
    lme = json.loads((work / "lmeval.json").read_text())
    n = agree = ties = acc_l = acc_e = 0
    for task, rows in lme["samples"].items():
        subject = task.removeprefix("evs_mmlu_")
        full = load(subject, "test")
        index = {json.dumps(r, sort_keys=True): i for i, r in enumerate(full)}
        mine = [json.loads(x) for x in (work / f"{subject}.test.jsonl").read_text().splitlines()]
        for r in rows:
            sid = f"{subject}/test/{index[json.dumps(mine[r['doc_id']], sort_keys=True)]}"
            lls = r["lls"]
            pred = LETTERS[lls.index(max(lls))]  # first argmax, as lm-eval
            o = ours[sid]
            n += 1
            agree += pred == o["pred"]
            ties += sorted(lls)[-1] == sorted(lls)[-2]
            acc_l += r["acc"]
            acc_e += o["value"]
    lo, hi = wilson(agree, n)
    print(f"items={n} agreement={agree / n:.4f} [{lo:.4f}, {hi:.4f}] lmeval_ties={ties} "
          f"acc_lmeval={acc_l / n:.4f} acc_evalsuite={acc_e / n:.4f} "
          f"lmeval_startup_s={lme['startup_s']:.1f} lmeval_eval_s={lme['eval_s']:.1f} "
          f"lmeval_loglikelihood_s={lme['scoring_s']:.1f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
