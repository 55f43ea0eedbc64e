"""Checkpoints: import, fingerprint, quantize, simulate, compile cache, the tiny test model. May import: core, data."""
