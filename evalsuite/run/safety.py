"""What a config may hand to vLLM, and the switches for the rest: allow-lists, not deny-lists.

vLLM, torch, triton and transformers read hundreds of engine arguments and environment variables,
and each release adds more; many name code to import, a file to load or a port to open. So only what
is listed here passes without a switch (docs/safety.md says why each is there):
- ENGINE_ARGS: vLLM EngineArgs fields that take a number, an on/off switch or a named choice. A key is
  the field's exact name (no dashes, no abbreviation: vLLM's parser would complete `hos` to `host`);
  dict values (compilation_config, speculative_config) are checked key by key, hf_overrides is data.
- ENV: variables of vLLM, CUDA, NCCL, Hugging Face's offline switches and thread counts, each set to
  a number, a switch or a name, never a path. And an engine mode's own arguments (its registry `own_args`).
Anything else needs `engine.unsafe_engine_args: true` (still an exact EngineArgs field, or a `vllm serve`
option where the mode's arguments land on its command line) or `engine.unsafe_env: true`; `config`
(a file of arguments) is refused always. The field names come from the installed vLLM's source, read without importing it (which is
slow). The checks take a mapping and where it sits, so other sections that start `vllm serve` reuse them.
Settings that reach another machine with a credential (REACHES) need `allow_hosts` to name the host.
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.util
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalsuite.core.configfile import from_include
from evalsuite.core.hosts import LOOPBACK, is_loopback, normal_host, tracking_host, url_host
from evalsuite.engine.registry import engine_kind

UNSAFE_ARGS = "engine.unsafe_engine_args: true"
UNSAFE_ENV = "engine.unsafe_env: true"
SAFETY_DOC = "docs/safety.md"

# A value of an allowed argument or variable: a number, a switch or a name. Never a path (no '/'),
# never a hidden or relative file ('.x'); at the top level of engine_args, never an option ('-x') of
# the command line it lands on (inside a mapping, `-op` is vLLM's "custom op off").
PLAIN = re.compile(r"[A-Za-z0-9_+:,=-][A-Za-z0-9_.+:,=|-]{0,127}|")
NUMBER = re.compile(r"[+-]?[0-9][0-9.eE+-]*")

# Engine arguments that take a number, an on/off switch or a named choice, and neither name code
# nor a file, nor open a port: memory and KV cache, numerics, parallelism on this host, scheduling,
# compilation. Names of other vLLM releases may stand here; each is checked against the installed one.
ENGINE_ARGS = frozenset({
    # memory and the KV cache
    "max_model_len", "max_num_seqs", "max_num_batched_tokens", "max_num_scheduled_tokens", "gpu_memory_utilization",
    "kv_cache_memory_bytes", "block_size", "enable_prefix_caching", "prefix_caching_hash_algo", "kv_cache_dtype",
    "kv_cache_dtype_skip_layers", "calculate_kv_scales", "num_gpu_blocks_override", "swap_space", "cpu_offload_gb",
    "mamba_cache_dtype", "mamba_ssm_cache_dtype", "mamba_block_size", "disable_sliding_window", "disable_cascade_attn",
    "disable_hybrid_kv_cache_manager",
    # numerics and kernels
    "dtype", "quantization", "seed", "enforce_eager", "max_seq_len_to_capture", "attention_backend", "moe_backend",
    "linear_backend", "logprobs_mode", "max_logprobs", "skip_tokenizer_init", "tokenizer_mode", "load_format",
    "model_impl",
    # parallelism within this host (ranks talk over loopback)
    "tensor_parallel_size", "pipeline_parallel_size", "distributed_executor_backend", "enable_expert_parallel",
    "disable_custom_all_reduce", "max_parallel_loading_workers", "enable_eplb", "expert_placement_strategy",
    "all2all_backend",
    # scheduling
    "enable_chunked_prefill", "long_prefill_token_threshold", "max_num_partial_prefills", "max_long_partial_prefills",
    "scheduling_policy", "async_scheduling", "stream_interval", "disable_chunked_mm_input", "performance_mode",
    # compilation and CUDA graphs
    "optimization_level", "compilation_config", "cudagraph_capture_sizes", "max_cudagraph_capture_size",
    # speculative decoding without a draft model of its own (ngram, suffix, MTP)
    "speculative_config",
    # the model's config.json, overridden key by key (data: its one key that names code, auto_map, is
    # read only with model.trust_remote_code, a switch of its own)
    "hf_overrides",
    # statistics
    "disable_log_stats", "aggregate_engine_logging",
})
# Arguments whose free text vLLM would resolve to code (a class path, a loader): the names vLLM knows.
CHOICES = {
    "distributed_executor_backend": ("mp", "uni", "ray", "external_launcher"),
    "load_format": ("auto", "pt", "safetensors", "npcache", "dummy", "gguf", "fastsafetensors", "runai_streamer"),
    "model_impl": ("auto", "vllm", "transformers", "terratorch"),
    "tokenizer_mode": ("auto", "hf", "slow", "mistral"),
}
# Keys of dict-valued arguments: None, any key whose value is a number, switch or name.
NESTED: dict[str, frozenset[str] | None] = {
    "compilation_config": frozenset({
        "mode", "level", "compile_sizes", "compile_ranges_endpoints", "cudagraph_mode", "cudagraph_capture_sizes",
        "max_cudagraph_capture_size", "cudagraph_num_of_warmups", "cudagraph_copy_inputs", "custom_ops",
        "splitting_ops", "use_inductor_graph_partition", "pass_config", "compile_mm_encoder", "cudagraph_mm_encoder",
        "use_cudagraph", "full_cuda_graph", "fast_moe_cold_start", "compile_cache_save_format"}),
    "compilation_config.pass_config": None,
    "speculative_config": frozenset({
        "method", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min", "enforce_eager",
        "disable_padded_drafter_batch", "parallel_drafting", "suffix_decoding_max_tree_depth",
        "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob"}),
}
DATA = frozenset({"hf_overrides"})  # values that are data whatever their keys
REFUSED = {"config": "a file of more arguments, which would pass unchecked; give each in engine_args"}

# Environment variables that tune the engine and name no file or code. Each value must be PLAIN.
ENV = frozenset({
    # vLLM
    "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_WORKER_MULTIPROC_METHOD", "VLLM_USE_FLASHINFER_SAMPLER",
    "VLLM_ATTENTION_BACKEND", "VLLM_FLASH_ATTN_VERSION", "VLLM_USE_DEEP_GEMM", "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
    "VLLM_ENGINE_ITERATION_TIMEOUT_S", "VLLM_RPC_TIMEOUT", "VLLM_LOGGING_LEVEL", "VLLM_CONFIGURE_LOGGING",
    "VLLM_LOG_STATS_INTERVAL", "VLLM_NO_USAGE_STATS", "VLLM_DO_NOT_TRACK", "VLLM_USE_AOT_COMPILE",
    "VLLM_DISABLE_COMPILE_CACHE", "VLLM_USE_STANDALONE_COMPILE", "VLLM_ENABLE_INDUCTOR_MAX_AUTOTUNE",
    "VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU", "VLLM_CPU_SGL_KERNEL",
    "VLLM_CPU_MOE_PREPACK", "VLLM_MARLIN_USE_ATOMIC_ADD", "VLLM_FUSED_MOE_CHUNK_SIZE", "VLLM_KV_CACHE_LAYOUT",
    "VLLM_SLEEP_WHEN_IDLE", "VLLM_ALLREDUCE_USE_SYMM_MEM", "VLLM_LOG_BATCHSIZE_INTERVAL",
    # CUDA and PyTorch's allocator
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING",
    "CUDA_DEVICE_MAX_CONNECTIONS", "PYTORCH_CUDA_ALLOC_CONF",
    # NCCL between the GPUs of this host
    "NCCL_DEBUG", "NCCL_P2P_DISABLE", "NCCL_IB_DISABLE", "NCCL_SHM_DISABLE", "NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE",
    "NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_BUFFSIZE", "NCCL_P2P_LEVEL",
    # Hugging Face: stay offline, quiet
    "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY",
    "HF_HUB_DISABLE_PROGRESS_BARS", "TOKENIZERS_PARALLELISM",
    # threads, and Python's own switches that load nothing
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONFAULTHANDLER",
    "PYTHONDONTWRITEBYTECODE",
})
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


# ---------------------------------------------------------------- the installed vLLM's argument names


@functools.cache
def vllm_arguments() -> tuple[str, frozenset[str], frozenset[str]] | None:
    """(vLLM's version, its EngineArgs field names, the further `vllm serve` option names), read from the
    installed vLLM's source; None where vLLM is not installed."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    engine = _fields(root / "engine" / "arg_utils.py", "EngineArgs")
    if not engine:
        return None
    server = _fields(root / "engine" / "arg_utils.py", "AsyncEngineArgs")
    for where in ("entrypoints/openai/cli_args.py", "entrypoints/launchers/cli_args.py"):
        server |= _fields(root / where, "FrontendArgs")
    from evalsuite.core.env import vllm_distribution

    return vllm_distribution()[1] or "?", engine, server - engine


def _fields(path: Path, name: str) -> frozenset[str]:
    """The annotated fields of class `name` in `path` and of its bases defined there, private ones left out."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    out: set[str] = set()
    todo = [name]
    while todo:
        cls = classes.get(todo.pop())
        if cls is None:
            continue
        out |= {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
                and not n.target.id.startswith("_") and "ClassVar" not in ast.unparse(n.annotation)}
        todo += [b.id for b in cls.bases if isinstance(b, ast.Name)]
    return frozenset(out)


# ---------------------------------------------------------------- checks


def engine_arg_problems(args: Mapping[str, Any], where: str, mode: str, unsafe: bool) -> list[str]:
    """One message per engine argument of `args` (found at `where`, e.g. `variants.bf16.engine_args`)
    that is not an exact argument name of the installed vLLM, or needs the switch and lacks it.
    Messages name keys, never values."""
    kind = engine_kind(mode)
    known = vllm_arguments()
    fields = known[1] if known else ENGINE_ARGS
    options = known[2] if known and kind.command_line else frozenset()  # each needs the switch
    extra = kind.own_args
    problems = []
    for key, value in args.items():
        at = f"{where}.{key}"
        if key in REFUSED:
            problems.append(f"{at}: refused: {REFUSED[key]}")
        elif kind.command_line and isinstance(value, list) and any(_option(str(v)) for v in value):
            problems.append(f"{at}: an item starts with '-': on `vllm serve`'s command line it would be an option "
                            f"of its own; refused, with or without {UNSAFE_ARGS}")
        elif key not in fields | options | extra:
            problems.append(f"{at}: {_not_a_name(key, fields | options | extra, known, bool(options))}")
        elif not unsafe and key not in ENGINE_ARGS | extra:
            problems.append(f"{at}: can name code or a file, or open a port; refused unless {UNSAFE_ARGS} "
                            f"(allowed without it: the engine arguments listed in {SAFETY_DOC})")
        elif not unsafe:
            problems += _value_problems(key, value, at)
    return problems


def _not_a_name(key: Any, names: frozenset[str], known: tuple | None, serve_options: bool) -> str:
    of = f"vLLM {known[0]}'s" if known else "the allowed (vLLM is not installed here to check others)"
    what = "EngineArgs fields or `vllm serve` options" if serve_options else "EngineArgs fields"
    text = str(key)
    exact = text.replace("-", "_").lower()
    near = [exact] if exact in names else difflib.get_close_matches(text, sorted(names), n=2, cutoff=0.7)
    hint = f"; did you mean {' or '.join(map(repr, near))}?" if near else ""
    return f"not an engine argument (allowed: {of} {what}, spelled exactly, never abbreviated){hint}"


def _value_problems(key: str, value: Any, at: str) -> list[str]:
    if key in CHOICES:
        if value not in CHOICES[key]:
            return [f"{at}: allowed values {', '.join(CHOICES[key])}; another names code to import, refused "
                    f"unless {UNSAFE_ARGS}"]
        return []
    if key in DATA:
        return [] if isinstance(value, dict) else [f"{at}: must be a mapping of config.json keys; refused unless "
                                                   f"{UNSAFE_ARGS}"]
    if key in NESTED:
        return _nested_problems(key, value, at)
    if isinstance(value, list):
        bad = [v for v in value if not _plain(v) or _option(v)]
        return [f"{at}: each item must be a number, switch or name (not a path, a mapping or an option); refused "
                f"unless {UNSAFE_ARGS}"] if bad else []
    return [] if _plain(value) and not _option(value) else [f"{at}: must be a number, switch or name (not a path or a mapping); refused unless "
                                     f"{UNSAFE_ARGS}"]


def _nested_problems(path: str, value: Any, at: str) -> list[str]:
    allowed = NESTED[path]
    if not isinstance(value, dict):
        return [] if path.count(".") == 0 and _plain(value) else [f"{at}: must be a mapping; refused unless {UNSAFE_ARGS}"]
    problems = []
    for key, inner in value.items():
        if allowed is not None and key not in allowed:
            problems.append(f"{at}.{key}: can name code or a file; refused unless {UNSAFE_ARGS} "
                            f"(allowed without it: {', '.join(sorted(allowed))})")
        elif f"{path}.{key}" in NESTED:
            problems += _nested_problems(f"{path}.{key}", inner, f"{at}.{key}")
        elif not all(_plain(v) for v in (inner if isinstance(inner, list) else [inner])):
            problems.append(f"{at}.{key}: must be a number, switch or name (or a list of them); refused unless "
                            f"{UNSAFE_ARGS}")
    return problems


def _option(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("-") and not NUMBER.fullmatch(value)


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str)
                                                                       and PLAIN.fullmatch(value) is not None)


def env_problems(env: Mapping[str, Any], where: str, unsafe: bool) -> list[str]:
    """One message per variable of `env` that is not on the allow-list, or whose value could be a path,
    unless `unsafe`. Messages name variables, never values."""
    problems = []
    for name, value in env.items():
        at = f"{where}.{name}"
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            problems.append(f"{at}: not an environment variable name (letters, digits and '_')")
        elif unsafe:
            continue
        elif name not in ENV:
            problems.append(f"{at}: not on the allow-list of variables (one may name code or a file); refused "
                            f"unless {UNSAFE_ENV} (allowed without it: the variables listed in {SAFETY_DOC})")
        elif not (isinstance(value, str) and PLAIN.fullmatch(value) and not _option(value)):
            problems.append(f"{at}: its value must be a number, switch or name (not a path); refused unless "
                            f"{UNSAFE_ENV}")
    return problems


def engine_problems(cfg: Any) -> list[str]:
    """Every refused engine argument and variable of a run config, in the config's order."""
    e = cfg.engine
    problems = [p for name, v in cfg.variants.items()
                for p in engine_arg_problems(v.engine_args, f"variants.{name}.engine_args", e.mode, e.unsafe_engine_args)]
    return problems + env_problems(e.env, "engine.env", e.unsafe_env)


def outside_lists(cfg: Any) -> tuple[list[str], list[str]]:
    """The engine arguments and variables of a config that only its switches let through."""
    args = [f"variants.{n}.engine_args.{k}" for n, v in cfg.variants.items() for k in v.engine_args
            if engine_arg_problems({k: v.engine_args[k]}, "", cfg.engine.mode, False)]
    env = [f"engine.env.{k}" for k in cfg.engine.env if env_problems({k: cfg.engine.env[k]}, "", False)]
    return args, env


# What each setting that may name another machine sends there (evalsuite.core.hosts)
REACHES = {
    "engine.base_url": "the run's prompts and $VLLM_API_KEY (if set)",
    "tracking.uri": "the run's records and $MLFLOW_TRACKING_TOKEN or $MLFLOW_TRACKING_USERNAME/PASSWORD (if set)",
    "scheduler.address": "the run's config, model path and tasks, and $RAY_AUTH_TOKEN (if set)",
}
UNSAFE_LISTEN = "scheduler.unsafe_listen: true"


def reached(cfg: Any) -> list[tuple[str, str | None]]:
    """(key, host) of each setting of REACHES the config sets to a server; host None where it names none."""
    out: list[tuple[str, str | None]] = []
    if cfg.engine.base_url:
        url = cfg.engine.base_url
        out.append(("engine.base_url", url_host(url) if url.startswith(("http://", "https://")) else None))
    if cfg.tracking.uri and (host := tracking_host(cfg.tracking.uri)):
        out.append(("tracking.uri", host))
    address = cfg.scheduler.address or ""
    if address not in ("", "auto", "local"):  # its form was checked: HOST:PORT or ray://HOST:PORT
        out.append(("scheduler.address", normal_host(address.removeprefix("ray://").rpartition(":")[0])))
    return out


def reach_problems(cfg: Any) -> list[str]:
    """Each setting that would send a credential to a host other than this machine that `allow_hosts` does not
    name, and each name of `allow_hosts` no setting uses (an allow kept for later is a silent one)."""
    allowed = {normal_host(h): h for h in cfg.allow_hosts}
    problems, used = [], set()
    for key, host in reached(cfg):
        if host is None:
            problems.append(f"{key}: not a URL of a server (allowed: http://HOST:PORT or https://HOST:PORT)")
        elif host in allowed:
            used.add(host)
        elif not is_loopback(host):
            source = from_include(tuple(key.split(".")), getattr(cfg, "_included", {}))
            named = f"host {host}" if source is None else f"its host (from included file {source}, not shown)"
            problems.append(f"{key}: {named} is not this machine, and {REACHES[key]} would go there; refused unless "
                            f"`allow_hosts` names it (allowed without it: {LOOPBACK})")
    unused = [name for norm, name in allowed.items() if norm not in used]
    if unused:
        problems.append(f"allow_hosts: {', '.join(unused)} named by no setting (allowed: the hosts of "
                        f"{', '.join(REACHES)}, each named where it is used)")
    return problems


def reach_notes(cfg: Any) -> list[str]:
    """What in a valid config leaves this machine, or may be reached from others."""
    notes = [f"allow_hosts: {key} reaches {host}: {REACHES[key]} go there"
             for key, host in reached(cfg) if host is not None and not is_loopback(host)]
    if cfg.scheduler.unsafe_listen:
        notes.append(f"{UNSAFE_LISTEN}: a Ray head this run starts (scheduler kind ray, or a variant's "
                     "distributed_executor_backend: ray) listens on every interface, reachable from other machines")
    return notes


def code_notes(cfg: Any) -> list[str]:
    """What in a valid config will run code beyond evalsuite's and vLLM's own, or reach beyond this machine,
    said by `validate` and `run`."""
    notes = []
    if cfg.model.trust_remote_code:
        notes.append("model.trust_remote_code: the model folder's own Python code will run")
    for task in cfg.tasks:
        if getattr(task, "include_path", None):
            notes.append(f"tasks.{task.name}.include_path: lm-eval will run the Python code (`!function`) "
                         f"of the task files in {task.include_path} (allow_code: true)")
    args, env = outside_lists(cfg)
    if cfg.engine.unsafe_engine_args:
        listed = f" ({', '.join(args)})" if args else ""
        notes.append(f"{UNSAFE_ARGS}: engine arguments pass unchecked{listed}; they may run code, read files "
                     "or open the server")
    if cfg.engine.unsafe_env:
        listed = f" ({', '.join(env)})" if env else ""
        notes.append(f"{UNSAFE_ENV}: environment variables pass unchecked{listed}; they may run code or read files")
    return notes + reach_notes(cfg)

