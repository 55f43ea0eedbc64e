"""Memory and speed models: devices, the memory planner, the roofline, engine log parsing, NVML, the GPU-idle share of a run's wall (busy), GPU sharing. May import: core."""
