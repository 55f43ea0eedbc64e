"""Units that several packages share, each defined once (vLLM's setting names and values: core/settings.py)."""

from __future__ import annotations

GIB = 1024**3
