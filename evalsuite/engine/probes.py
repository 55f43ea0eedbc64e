"""Functions run inside vLLM's worker via `LLM.apply_model`; must stay importable and light."""


def model_bytes(model) -> dict:
    """Bytes held by the loaded model's parameters and buffers, as stored (packed for int4)."""
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    dtypes: dict[str, int] = {}
    for p in model.parameters():
        key = str(p.dtype).replace("torch.", "")
        dtypes[key] = dtypes.get(key, 0) + p.numel() * p.element_size()
    return {"param_bytes": params, "buffer_bytes": buffers, "bytes_by_dtype": dtypes}
