"""How many requests at once keep an engine busy, and so how large a KV pool a task needs.

An engine's throughput rises with the requests it holds at once, then flattens: once its steps are
full, more requests only wait their turn. A pool sized for that concurrency serves a task at the rate
of one sized for its whole batch of its longest request, in a fraction of the memory, so more engines
fit on a card beside each other. Where the concurrency comes from, best first:
- a measured curve (`bench/prefill_curve.py --save`, kept in `<cache>/throughput/`): `saturation()`
  reads where it flattens; a curve of another shape is scaled by the roofline's ratio between shapes;
- the roofline (evalsuite.memory.roofline): a wave of c requests costs their prefill (COMPUTE_EFFICIENCY
  of the peak, the weights read once a step of max_num_batched_tokens) plus their decode steps (the
  weights once and each request's KV, at BANDWIDTH_EFFICIENCY), each step STEP_OVERHEAD_S more; c is
  where c / wave reaches FLAT of its value at the largest c, never fewer than fill the steps in flight.
  On a CPU its figures are placeholders: a curve or nothing (None: the caller keeps its own sizing).
Decodes are assumed to run alone after the prefill (max_tokens where EOS is ignored); chunked prefill
lets them ride in prefill steps, so the estimate errs towards more concurrency.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evalsuite.memory.devices import get_device

# vLLM on the H200 reached ~60% of the compute floor in prefill and ~70% of the bandwidth floor in
# decode on the measured rows (evalsuite.memory.roofline).
COMPUTE_EFFICIENCY = 0.6
BANDWIDTH_EFFICIENCY = 0.7
# A step's fixed cost beyond its roofline time (scheduling, launches, sampling): fitted on the
# 1.5B's decode at 1K alone on the H200, 2.56 ms a token against 0.94 ms of weights read at 70%.
STEP_OVERHEAD_S = 1.6e-3
FLAT = 0.95  # a curve is flat from the concurrency that reaches this share of its largest value
# Steps a GPU engine has in flight (vLLM's async scheduling plans the next while one runs). The
# estimate never holds fewer requests than fill them: a GEMM over a few hundred tokens runs well
# below the constant efficiency above, and the step budget is what vLLM sizes for the device.
STEPS_IN_FLIGHT = 2
CURVES_DIR = "throughput"  # under the cache folder


class Shape(NamedTuple):
    """One kind of request a task sends: its prompt, the tokens it may generate (the pool keeps room
    for them), and those it is expected to decode (all of them where the request ignores EOS; else
    about its expected answer's), which sets what decode costs a wave."""

    prompt_tokens: int
    output_tokens: int
    decode_tokens: int | None = None  # None: output_tokens

    @property
    def decoded(self) -> int:
        return self.output_tokens if self.decode_tokens is None else self.decode_tokens


class CurvePoint(BaseModel):
    model_config = ConfigDict(extra="forbid")

    concurrency: int = Field(gt=0)
    requests_per_s: float = Field(gt=0)


class Curve(BaseModel):
    """Throughput against requests at once, for requests of one shape on one model and device."""

    model_config = ConfigDict(extra="forbid")

    model: str  # the model folder's name (the import cache's, which names the checkpoint)
    device: str  # the planner's device key (H200, cpu, ...)
    prompt_tokens: int = Field(gt=0)
    output_tokens: int = Field(gt=0)
    points: list[CurvePoint] = Field(min_length=1)
    source: str  # where and how it was measured: machine, date, versions, command

    @property
    def shape(self) -> Shape:
        return Shape(self.prompt_tokens, self.output_tokens)


def saturation(curve: Curve, flat: float = FLAT) -> int:
    """The fewest requests at once at which the measured throughput reaches `flat` of its largest."""
    top = max(p.requests_per_s for p in curve.points)
    return min(p.concurrency for p in curve.points if p.requests_per_s >= flat * top)


class _Costs(NamedTuple):
    compute_s: float  # one request's prefill compute
    weights_s: float  # one read of the weights: a step's floor
    kv_s: float  # one request's KV read in a decode step


def _costs(config: dict[str, Any], shape: Shape, gpu: str, settings: dict[str, Any]) -> _Costs:
    from evalsuite.memory.roofline import roofline

    kw = {"gpu": gpu, "compute_efficiency": COMPUTE_EFFICIENCY, "bandwidth_efficiency": BANDWIDTH_EFFICIENCY,
          **settings}
    at_len = roofline(config, prompt_tokens=shape.prompt_tokens, **kw)
    bare = roofline(config, prompt_tokens=shape.prompt_tokens, context_tokens=0, **kw)
    return _Costs(at_len.prefill_compute_s, bare.itl_floor_ms / 1e3, (at_len.itl_floor_ms - bare.itl_floor_ms) / 1e3)


def wave_rate(costs: _Costs, shape: Shape, c: int, step_tokens: int) -> float:
    """Requests a second when c requests of `shape` are prefilled together, then decoded together."""
    steps = math.ceil(c * shape.prompt_tokens / step_tokens)
    prefill = max(c * costs.compute_s, steps * costs.weights_s) + steps * STEP_OVERHEAD_S
    decode = max(shape.decoded - 1, 0) * (costs.weights_s + c * costs.kv_s + STEP_OVERHEAD_S)
    return c / (prefill + decode)


def estimate(config: dict[str, Any], shape: Shape, gpu: str, step_tokens: int, most: int,
             settings: dict[str, Any] | None = None) -> int | None:
    """The roofline's fewest requests at once (at most `most`) at which c / wave reaches FLAT of its
    value at `most`; None on a device whose roofline figures are placeholders (a CPU)."""
    if get_device(gpu).kind == "cpu":
        return None
    costs = _costs(config, shape, gpu, settings or {})
    top = wave_rate(costs, shape, most, step_tokens)
    flat = next(c for c in range(1, most + 1) if wave_rate(costs, shape, c, step_tokens) >= FLAT * top)
    return min(most, max(flat, math.ceil(STEPS_IN_FLIGHT * step_tokens / shape.prompt_tokens)))


def request_seconds(config: dict[str, Any], shape: Shape, gpu: str, step_tokens: int, c: int,
                    settings: dict[str, Any] | None = None) -> float | None:
    """The roofline's GPU seconds a request of `shape` costs with c of them at once; None on a device
    whose roofline figures are placeholders (a CPU)."""
    if get_device(gpu).kind == "cpu":
        return None
    return 1.0 / wave_rate(_costs(config, shape, gpu, settings or {}), shape, c, step_tokens)


def load_curves(cache_dir: Path | None, model: str, device: str) -> list[Curve]:
    """The measured curves kept for this model and device; an unreadable file is passed over (a
    curve only refines an estimate, never blocks a run)."""
    folder = Path(cache_dir) / CURVES_DIR if cache_dir else None
    out = []
    for path in sorted(folder.glob("*.json")) if folder and folder.is_dir() else []:
        try:
            curve = Curve.model_validate(json.loads(path.read_text()))
        except (OSError, ValueError, ValidationError):
            continue
        if curve.model == model and curve.device.lower() == device.lower():
            out.append(curve)
    return out


def nearest(curves: list[Curve], shape: Shape) -> Curve | None:
    """The curve whose prompt length is nearest `shape`'s on a log scale."""
    return min(curves, key=lambda c: abs(math.log(c.prompt_tokens / shape.prompt_tokens)), default=None)


def busy_concurrency(config: dict[str, Any], shape: Shape, gpu: str, step_tokens: int, most: int,
                     curves: list[Curve], settings: dict[str, Any] | None = None) -> tuple[int | None, str]:
    """(requests at once that keep the engine busy on `shape`, where that figure comes from): a
    measured curve of this shape as it is, one of another shape scaled by the roofline, the roofline
    alone, or (None, why not)."""
    curve = nearest(curves, shape)
    if curve is not None and curve.shape == shape:
        return min(saturation(curve), most), "measured"
    here = estimate(config, shape, gpu, step_tokens, most, settings)
    if curve is None:
        return here, "roofline" if here is not None else "no curve, and no roofline on this device"
    there = estimate(config, curve.shape, gpu, step_tokens, most, settings)
    if here is None or there is None:  # a CPU: the curve's requests-worth of tokens, no finer
        tokens = saturation(curve) * (curve.prompt_tokens + curve.output_tokens)
        return min(most, math.ceil(tokens / (shape.prompt_tokens + shape.output_tokens))), "measured, by tokens"
    return min(most, math.ceil(saturation(curve) * here / there)), "measured, scaled by the roofline"
