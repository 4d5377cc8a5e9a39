"""Supervision: strategies, child specs, restart intensity, backoff and directives."""
