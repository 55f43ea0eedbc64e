"""Memory and speed models: devices, the memory planner, the roofline, engine log parsing, NVML, GPU sharing. May import: core."""
