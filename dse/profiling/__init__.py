"""Profiling one candidate on its device (``dse profile``): the backend's own per-operator
profiler, the roofline verdict per operator, and the system profilers present there (Linux
``perf``, NVIDIA Nsight). Plain-data modules (``summary``) are importable without any runtime."""
