"""The capacity pass on the real CPU engine: configs/cpu-capacity.yaml as shipped (its smoke test:
SmolLM2-135M behind `vllm serve` on loopback, the prefill curve, then a search of two levels of 10-16
requests through one resident `vllm bench serve`).

Checks what the record must hold (the search's levels in order, why each, the prediction, the
requests each level's percentiles need, throughput, percentiles, KV use and preemptions from
/metrics, the host's load) and that it agrees with the load generator's own output of the same
run: each figure the record keeps is the one `vllm bench serve` printed. Then compare, the report
page and MLflow read it back. Whether the SLO held is not asserted: that is the host's.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

# one engine start and two levels of 10-16 requests: 590 s for the module with 20-request levels at load 7-17
pytestmark = [pytest.mark.engine, pytest.mark.timeout(2400)]

REPO = Path(__file__).resolve().parents[1]
# the lines of `vllm bench serve`'s printed result that the record keeps, and where it keeps them
PRINTED = {"Successful requests:": "completed", "Failed requests:": "failed",
           "Request throughput (req/s):": "req_per_s", "Output token throughput (tok/s):": "output_tok_per_s",
           "Total token throughput (tok/s):": "total_tok_per_s"}
PRINTED_PERCENTILE = re.compile(r"^P(\d+) (TTFT|TPOT|ITL|E2EL) \(ms\):\s+([\d.]+)")


def evalsuite(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evalsuite", *args], capture_output=True, text=True, timeout=2300)


@pytest.fixture(scope="module")
def capacity_run(tmp_path_factory, mlflow_server) -> Path:
    """configs/cpu-capacity.yaml as shipped, logged to a real MLflow server, without its time guards
    (a level's deadline, the search's budget): on a loaded host they would cut what is checked here."""
    tmp = tmp_path_factory.mktemp("capacity")
    cfg = yaml.safe_load((REPO / "configs" / "cpu-capacity.yaml").read_text())
    cfg["include"] = str(REPO / "configs" / "base" / "cpu.yaml")
    cfg["tracking"] = {"uri": mlflow_server.uri, "experiment": "capacity-test"}
    cfg["capacity"]["timeout_s"] = 1800
    cfg["capacity"]["search"]["budget_s"] = None
    path = tmp / "cpu-capacity.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = evalsuite("run", str(path), "-V", "bf16", "-o", str(tmp / "runs"), "--no-progress")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (run,) = [p for p in (tmp / "runs").iterdir() if (p / "run.json").is_file()]
    return run


def levels(run: Path) -> list[dict]:
    return [json.loads(line)["score"]["extra"] for line in (run / "bf16" / "samples" / "capacity.jsonl").open()]


def printed(log: Path) -> dict[str, float]:
    """The load generator's printed result block, as figures by the record's names."""
    out: dict[str, float] = {}
    block = log.read_text().split(" Serving Benchmark Result ")[-1]
    for line in block.splitlines():
        for head, key in PRINTED.items():
            if line.startswith(head):
                out[key] = float(line[len(head):].split()[0])
        if m := PRINTED_PERCENTILE.match(line):
            out[f"{m[2].lower()}_p{m[1]}"] = float(m[3])
    return out


def test_every_level_is_recorded_with_its_search_server_and_host(capacity_run):
    got = levels(capacity_run)
    assert [(lv["length"], lv["order"]) for lv in got] == [(64, 1), (64, 2)] and got[0]["level"] == 2.0
    assert got[1]["level"] in (1.0, 4.0) and got[0]["chosen"] == "first: search.start 2"
    assert got[1]["chosen"] == ("up: 2 met the SLO" if got[0]["met"] else "down: 2 did not meet the SLO")
    predicted = got[0]["predicted"]  # the prefill curve measured on the server before the first level
    assert [c for c, _ in predicted["prefill_s"]] == [1, 4] and all(s > 0 for _, s in predicted["prefill_s"])
    assert predicted["kv_bound"] > 4 and predicted == got[1]["predicted"]
    for lv in got:
        assert lv["status"] == "ok", lv["reason"]
        assert lv["completed"] == lv["requests"] and lv["requests"] in (10, 16) and lv["needed"] == 10
        assert lv["failed"] == 0
        assert lv["req_per_s"] > 0 and lv["output_tok_per_s"] > 0 and lv["met"] in (True, False)
        assert set(lv["percentiles"]) == {"ttft", "itl", "tpot", "e2el"} and "99" not in lv["percentiles"]["ttft"]
        assert lv["server"]["readings"] >= 1 and 0 < lv["server"]["kv_usage_peak"] <= 1
        assert lv["server"]["preemptions"] is not None and lv["server"]["running_peak"] >= 1
        assert lv["server"]["prefix_hit_rate"] < 0.1  # its own prompts: not the level before's, from the cache
        assert lv["host_load"]["cpus"] >= 1 and lv["host_load"]["end"] is not None
        assert lv["loadgen"]["tool"] == "vllm bench serve" and "vllm" in lv["loadgen"]["version"]
        assert not any("key" in part.lower() for part in lv["loadgen"]["command"])
        assert lv["kv_cache_tokens"] > 0 and lv["block_size"] > 0
    assert max(lv["server"]["running_peak"] for lv in got) >= 2  # the 2-user level had both in flight
    assert (capacity_run / "bf16" / "capacity" / "loadgen.log").is_file()  # one load generator, resident


def test_the_record_agrees_with_the_load_generators_own_output(capacity_run):
    """Same run, same numbers: what `vllm bench serve` printed and saved is what the record says."""
    folder = capacity_run / "bf16" / "capacity"
    for lv in levels(capacity_run):
        shown = printed(folder / lv["loadgen"]["log"])
        for key in PRINTED.values():
            assert lv[key] == pytest.approx(shown[key], abs=0.006), key
        for metric, by_q in lv["percentiles"].items():
            for q, value in by_q.items():
                assert value == pytest.approx(shown[f"{metric}_p{q}"], abs=0.006), (metric, q)
        saved = json.loads(gzip.open(folder / lv["loadgen"]["result"]).read())
        assert saved["completed"] == lv["completed"] and saved["p90_ttft_ms"] == lv["percentiles"]["ttft"]["90"]
        assert len(saved["ttfts"]) == lv["requests"]  # every request's timings are kept


def test_metrics_compare_report_and_mlflow_read_it_back(capacity_run, tmp_path, mlflow_server):
    result = json.loads((capacity_run / "bf16" / "result.json").read_text())
    by_name = {m["name"]: m for m in result["metrics"]}
    at = by_name["capacity/users_at_slo/ctx64"]
    assert at["unit"] == "users" and at["value"] in (0, 1, 2, 4) and result["status"] == "ok"
    assert by_name["capacity/kv_bound_users/ctx64"]["value"] > 4 and by_name["capacity/levels_run/ctx64"]["value"] == 2
    assert by_name["capacity/predicted_users/ctx64"]["value"] == 2 and by_name["capacity/search_s/ctx64"]["value"] > 0
    assert {"capacity/req_per_s/ctx64_c2", "capacity/ttft_ms_p90/ctx64_c2", "capacity/kv_usage_peak_pct/ctx64_c2",
            "capacity/preemptions/ctx64_c2"} <= by_name.keys()
    shown = evalsuite("compare", str(capacity_run), "--format", "csv")
    assert shown.returncode == 0 and "capacity/users_at_slo/ctx64" in shown.stdout, shown.stderr
    page = evalsuite("report", str(capacity_run), "--out", str(tmp_path / "page"))
    assert page.returncode == 0, page.stderr
    text = (tmp_path / "page" / "report.md").read_text()
    assert "## Capacity under load" in text and "at SLO @64" in text and (tmp_path / "page" / "capacity_64.png").is_file()
    assert "| users at SLO @64 | KV-bound @64 |" in text and "from 2 predicted (search.start 2); 2 (10), " in text
    import mlflow

    client = mlflow.MlflowClient(mlflow_server.uri)
    exp = client.get_experiment_by_name("capacity-test")
    (child,) = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("mlflow.runName") == "bf16"]
    assert child.data.metrics["capacity/users_at_slo/ctx64"] == at["value"]
    assert child.data.metrics["capacity/predicted_users/ctx64"] == 2 and "capacity/levels_run/ctx64" in child.data.metrics
    if at["value"]:  # the baseline against itself, where it met the SLO at some level
        assert child.data.metrics["capacity/users_vs_baseline/ctx64"] == 1.0
    assert "capacity.jsonl" in {a.path.rsplit("/", 1)[-1] for a in client.list_artifacts(child.info.run_id, "samples")}
