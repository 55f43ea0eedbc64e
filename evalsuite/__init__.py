"""evalsuite: accuracy, memory and latency of vLLM memory-saving settings."""
__version__ = "0.1.0"
