"""Memory and speed models: devices, the memory planner, the roofline, engine log parsing, NVML. May import: core."""
