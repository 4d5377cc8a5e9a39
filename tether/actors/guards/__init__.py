"""Guards: the pure, clock-driven cores of per-tool circuit breakers and loop detectors."""
