"""What a task config says of its items before any engine starts: the gated metrics it will make and the
items behind each (`planned`, which evalsuite.run.sizing weighs against the gate rules), after `run
--limit` narrowed it (`narrow`). Every registered task type declares both (evalsuite.tasks.registry).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Planned:
    metric: str
    keys: list[tuple]  # one per item: the strata the metric weighs it by (() where all weigh alike)
    # a balanced accuracy, planned with its labels split evenly (the best case) but the strata's MOVER
    # floor, as the gate takes for labels whose counts differ
    even_labels: bool = False

    @property
    def n(self) -> int:
        return len(self.keys)


def grid(name: str, head: str, lengths: list[int], per_length: int) -> list[Planned]:
    """A metric over every length, and one a length, each length holding `per_length` items."""
    whole = Planned(f"{name}/{head}", [()] * per_length * len(lengths))
    return [whole] + [Planned(f"{name}/{head}/len{n}", [()] * per_length) for n in lengths]


def capped(out: list[Planned], limit: int | None) -> list[Planned]:
    """`run --limit` spreads at most `limit` items over the task: each metric keeps its share."""
    if not out or limit is None or limit >= out[0].n:
        return out
    share = limit / out[0].n
    return [Planned(p.metric, p.keys[:max(1, int(p.n * share))]) for p in out]
