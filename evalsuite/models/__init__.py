"""Checkpoints: import, a hub model's cached config, fingerprint, quantize, simulate, compile cache, the tiny test model. May import: core, data."""
