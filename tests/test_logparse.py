"""Log fallback: sample lines follow vLLM's format strings (0.26 gpu_worker, 0.32 gpu/cpu workers,
kv_cache_utils, model runners, stat loggers); numbers are those of the H200 and CPU runs."""

from __future__ import annotations

import pytest

from evalsuite.core.types import EngineStats
from evalsuite.memory.logparse import engine_stats_from_log, parse_engine_log, required_gib, with_derived

V026_GPU = """\
INFO 11-29 10:01:02 [__init__.py:239] Automatically detected platform cuda.
INFO 11-29 10:01:09 [core.py:93] Initializing a V1 LLM engine (v0.26.0) with config: model='/root/llama8b', \
speculative_config=None, tokenizer='/root/llama8b', skip_tokenizer_init=True, tokenizer_mode=auto, \
revision=None, tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=131072, \
download_dir=None, load_format=dummy, tensor_parallel_size=1, pipeline_parallel_size=1, quantization=None, \
enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, seed=0, enable_prefix_caching=True
(EngineCore_0 pid=4121) INFO 11-29 10:01:15 [gpu_model_runner.py:2653] Model loading took 15.0 GiB memory \
and 5.420225 seconds
(EngineCore_0 pid=4121) INFO 11-29 10:01:41 [gpu_worker.py:298] Available KV cache memory: 111.61 GiB
(EngineCore_0 pid=4121) INFO 11-29 10:01:41 [kv_cache_utils.py:1087] GPU KV cache size: 914,304 tokens
(EngineCore_0 pid=4121) INFO 11-29 10:01:41 [kv_cache_utils.py:1091] Maximum concurrency for 131,072 tokens \
per request: 6.98x
(EngineCore_0 pid=4121) INFO 11-29 10:02:02 [gpu_model_runner.py:3480] Graph capturing finished in 9 secs, \
took 0.99 GiB
(EngineCore_0 pid=4121) INFO 11-29 10:02:02 [gpu_worker.py:391] Free memory on device (139.31/139.8 GiB) on \
startup. Desired GPU memory utilization is (0.92, 128.62 GiB). Actual usage is 15.0 GiB for weight, 1.78 GiB \
for peak activation, 0.22 GiB for non-torch memory, and 0.99 GiB for CUDAGraph memory. Replace \
gpu_memory_utilization config with `--kv-cache-memory=118626545500` (110.48 GiB) to fit into requested memory, \
or `--kv-cache-memory=129620742963` (120.72 GiB) to fully utilize gpu memory. Current kv cache memory in use is \
111.61 GiB.
(EngineCore_0 pid=4121) INFO 11-29 10:02:03 [core.py:214] init engine (profile, create kv cache, warmup model) \
took 54.21 seconds
"""

V032_GPU = """\
INFO 12-01 17:00:02 [core.py:134] Initializing a V1 LLM engine (v0.32.0) with config: model='/m', \
dtype=torch.bfloat16, max_seq_len=131072, quantization=fp8, kv_cache_dtype=fp8, device_config=cuda
(EngineCore pid=326) INFO 12-01 17:00:11 [gpu_model_runner.py:5150] Model loading took 8.54 GiB memory and \
5.420225 seconds
(EngineCore pid=326) INFO 12-01 17:00:33 [gpu_worker.py:760] Available KV cache memory: 118.07 GiB
(EngineCore pid=326) INFO 12-01 17:00:33 [kv_cache_utils.py:2328] GPU KV cache size: 1,934,400 tokens, \
Maximum concurrency for 131,072 tokens per request: 14.76x
(EngineCore pid=326) INFO 12-01 17:00:40 [gpu_model_runner.py:6582] Graph capturing finished in 7 secs, \
took 0.91 GiB
(EngineCore pid=326) INFO 12-01 17:00:41 [gpu_worker.py:1019] Free memory on device (139.31/139.8 GiB) on \
startup. Desired GPU memory utilization is (0.92, 128.62 GiB). Actual usage is 8.76 GiB for consumed memory \
(weights + non-torch), 1.78 GiB for peak activation, and 0.91 GiB for CUDAGraph memory. Replace \
gpu_memory_utilization config with `--kv-cache-memory=125329070080` (116.72 GiB) to fit into requested memory, \
or `--kv-cache-memory=136323267543` (126.96 GiB) to fully utilize gpu memory. Current kv cache memory in use is \
118.07 GiB.
(EngineCore pid=326) INFO 12-01 17:00:42 [core.py:403] init engine (profile, create kv cache, warmup model) \
took 31.02 s (compilation: 12.40 s)
(APIServer pid=300) INFO 12-01 17:01:12 [loggers.py:259] Engine 000: Avg prompt throughput: 12990.2 tokens/s, \
Avg generation throughput: 0.1 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 6.7%, \
Prefix cache hit rate: 0.0%
(APIServer pid=300) INFO 12-01 17:01:22 [loggers.py:259] Engine 000: Avg prompt throughput: 0.0 tokens/s, \
Avg generation throughput: 12.7 tokens/s, Running: 8 reqs, Waiting: 2 reqs, Preemptions: 3, \
GPU KV cache usage: 99.1%, Prefix cache hit rate: 0.0%
(APIServer pid=300) INFO 12-01 17:01:32 [loggers.py:259] Engine 000: Avg prompt throughput: 0.0 tokens/s, \
Avg generation throughput: 13.1 tokens/s, Running: 8 reqs, Waiting: 0 reqs, Preemptions: 2, \
GPU KV cache usage: 97.0%, Prefix cache hit rate: 0.0%
"""

V032_CPU = """\
INFO 12-01 09:12:01 [core.py:134] Initializing a V1 LLM engine (v0.32.0) with config: model='/tmp/qwen1.5b', \
dtype=torch.bfloat16, max_seq_len=4096, kv_cache_dtype=auto, device_config=cpu
(EngineCore pid=911) INFO 12-01 09:12:03 [cpu_model_runner.py:68] Starting to load model /tmp/qwen1.5b...
(EngineCore pid=911) INFO 12-01 09:12:04 [default_loader.py:502] Loading weights took 0.41 seconds
(EngineCore pid=911) INFO 12-01 09:12:05 [cpu_model_runner.py:87] Warming up model for the compilation...
(EngineCore pid=911) INFO 12-01 09:12:19 [cpu_model_runner.py:91] Warming up done.
(EngineCore pid=911) INFO 12-01 09:12:19 [cpu_worker.py:260] Auto set (11.62/62.7) GiB for KV cache on node 0, \
with 18.81 GiB requested memory for the worker. 7.19 GiB memory was consumed by non-kv usages.
(EngineCore pid=911) INFO 12-01 09:12:19 [kv_cache_utils.py:2328] CPU KV cache size: 435,072 tokens, \
Maximum concurrency for 4,096 tokens per request: 106.22x
(EngineCore pid=911) INFO 12-01 09:12:21 [core.py:403] init engine (profile, create kv cache, warmup model) \
took 17.93 s
"""

V032_CPU_EXPLICIT = """\
(EngineCore pid=12) INFO 12-01 09:20:19 [cpu_worker.py:260] Explicitly set (4.0/62.7) GiB for KV cache on node 0.
(EngineCore pid=12) INFO 12-01 09:20:19 [kv_cache_utils.py:2328] CPU KV cache size: 149,760 tokens, \
Maximum concurrency for 8,192 tokens per request: 18.28x
"""


def test_v026_gpu_split():
    f = parse_engine_log(V026_GPU)
    assert f["vllm_version"] == "0.26.0"
    assert (f["weights_gib"], f["peak_activation_gib"], f["non_torch_gib"], f["cuda_graph_gib"]) == (
        15.0, 1.78, 0.22, 0.99)
    assert f["kv_cache_gib"] == 111.61 and f["reserved_gib"] == 128.62
    assert f["kv_cache_tokens"] == 914_304 and isinstance(f["kv_cache_tokens"], int)
    assert (f["max_model_len"], f["max_concurrency"]) == (131_072, 6.98)
    assert "num_preemptions" not in f and "kv_used_peak_gib" not in f


def test_v032_gpu_split_derives_non_torch_from_consumed():
    f = parse_engine_log(V032_GPU)
    assert f["vllm_version"] == "0.32.0"
    assert f["weights_gib"] == 8.54
    assert f["non_torch_gib"] == pytest.approx(0.22)
    assert f["peak_activation_gib"] == 1.78 and f["cuda_graph_gib"] == 0.91
    assert f["kv_cache_tokens"] == 1_934_400 and f["max_concurrency"] == 14.76


def test_v032_periodic_stats_give_peak_usage_and_preemptions():
    f = parse_engine_log(V032_GPU)
    assert f["num_preemptions"] == 5  # per-interval counts, summed
    assert f["kv_used_peak_gib"] == pytest.approx(0.991 * 118.07, abs=1e-3)
    f_blocks = parse_engine_log(V032_GPU + "INFO x [interface.py:924] Setting attention block size to 16 tokens\n")
    assert f_blocks["kv_used_peak_blocks"] == round(0.991 * (1_934_400 // 16))


def test_v032_cpu_auto_and_explicit():
    f = parse_engine_log(V032_CPU)
    assert f["kv_cache_gib"] == 11.62 and f["reserved_gib"] == 18.81
    assert f["kv_cache_tokens"] == 435_072 and f["max_model_len"] == 4096
    assert "weights_gib" not in f  # the CPU runner does not log model memory
    g = parse_engine_log(V032_CPU_EXPLICIT)
    assert g["kv_cache_gib"] == 4.0 and g["kv_cache_tokens"] == 149_760 and g["max_concurrency"] == 18.28


def test_last_engine_wins_when_a_log_holds_several_starts():
    f = parse_engine_log(V026_GPU + V032_GPU)
    assert f["vllm_version"] == "0.32.0" and f["weights_gib"] == 8.54


def test_max_seq_len_from_config_line_when_no_concurrency_line():
    assert parse_engine_log(V032_GPU.split("\n")[0] + "\n")["max_model_len"] == 131072


def test_older_formats():
    f = parse_engine_log("INFO [model_runner.py:1] Loading model weights took 14.9888 GB\n"
                         "INFO [executor_base.py:1] # GPU blocks: 27898, # CPU blocks: 2048\n")
    assert f["weights_gib"] == 14.9888 and f["kv_cache_blocks"] == 27898


def test_nothing_found():
    assert parse_engine_log("") == {}
    assert parse_engine_log("Traceback (most recent call last):\nRuntimeError: CUDA out of memory\n") == {}


def test_every_key_is_an_engine_stats_field():
    for text in (V026_GPU, V032_GPU, V032_CPU, V032_CPU_EXPLICIT):
        found = parse_engine_log(text)
        assert set(found) <= set(EngineStats.model_fields)
        EngineStats(**found)


def test_engine_stats_from_log_marks_sources_and_computes_required():
    s = engine_stats_from_log(V032_GPU)
    assert s.source["kv_cache_tokens"] == "log"
    assert s.source["required_gib"] == "computed"
    assert s.required_gib == pytest.approx(8.54 + 1.78 + 0.22 + 0.991 * 118.07 + 0.91, abs=0.01)


def test_required_gib_needs_peak_kv():
    s = engine_stats_from_log(V026_GPU)
    assert s.required_gib is None  # no periodic stats: KV used at peak unknown
    s.kv_used_peak_blocks, s.kv_cache_blocks = 8192, 57_144
    assert required_gib(s) == pytest.approx(15.0 + 1.78 + 0.22 + 0.99 + 8192 / 57_144 * 111.61, abs=1e-3)


def test_with_derived_blocks_from_tokens():
    s = with_derived(EngineStats(kv_cache_tokens=914_304, block_size=16))
    assert s.kv_cache_blocks == 57_144 and s.source["kv_cache_blocks"] == "computed"


def test_the_logs_load_figure_is_kept_beside_the_parameter_bytes(tmp_path):
    """The API's weights (parameter and buffer bytes) stay; vLLM's "Model loading took" goes to
    weights_loaded_gib, which a GGUF model's dequantized tensors put 0.46 GiB above it (the 1.5B
    on the H200: 1.05 GiB of parameters, 1.51 GiB loaded)."""
    from evalsuite.engine.offline import fill_from_log

    log = tmp_path / "engine.log"
    log.write_text("(EngineCore pid=7120) INFO 12-02 00:00:35 [model_runner.py:305] Model loading took 1.51 GiB "
                   "and 67.873189 seconds\n")
    stats = EngineStats(weights_gib=1.0518, source={"weights_gib": "api"})
    fill_from_log(stats, log)
    assert (stats.weights_gib, stats.source["weights_gib"]) == (1.0518, "api")
    assert (stats.weights_loaded_gib, stats.source["weights_loaded_gib"]) == (1.51, "log")
    assert parse_engine_log(log.read_text())["weights_loaded_gib"] == 1.51
