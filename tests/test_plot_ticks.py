"""compare --out's trade-off plots: tick labels that never run into each other, six-digit token counts
written short (145K), in panels as narrow as three tasks make them."""

from __future__ import annotations

import pandas as pd

from evalsuite.report import plots

ACCURACY = ["mmlu/acc", "legal/balanced_acc", "needle/acc"]


def _drawn(monkeypatch, tmp_path, x_col: str, xs: list[float]):
    kept = {}

    def save(fig, path):
        kept["fig"] = fig
        return path

    monkeypatch.setattr(plots, "_save", save)
    frame = pd.DataFrame({x_col: xs, "mmlu/acc": [0.35, 0.25, 0.29, 0.31], "legal/balanced_acc": [0.55, 0.52, 0.61, 0.65],
                          "needle/acc": [1.0, 0.54, 0.6, 1.0]}, index=["bf16", "w4a16_sim", "w4a16", "kv_fp8"])
    plots.plot_tradeoff(frame, ACCURACY, x_col, "x", False, tmp_path / "p.png")
    fig = kept["fig"]
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    return [[t for t in ax.get_xticklabels() if t.get_text() and t.get_visible()] for ax in fig.axes if ax.get_visible()], \
        renderer


def test_kv_token_ticks_are_short_and_apart(monkeypatch, tmp_path):
    panels, renderer = _drawn(monkeypatch, tmp_path, "engine/kv_cache_tokens", [145_221, 145_221, 145_221, 290_496])
    for labels in panels:
        texts = [t.get_text() for t in labels]
        assert texts and all(t.endswith("K") for t in texts), texts
        boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
        assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:])), texts  # no label runs into the next


def test_small_figures_stay_as_they_are(monkeypatch, tmp_path):
    panels, _ = _drawn(monkeypatch, tmp_path, "engine/weights_gib", [0.531, 0.376, 0.397, 0.531])
    assert all("K" not in t.get_text() for labels in panels for t in labels)
