"""The OpenTelemetry instrumentation scope tether reports under: one tracer and one meter,
named ``tether`` with tether's version, for every layer (the runtime's spans and metrics, the
sessions' model calls).

With no OpenTelemetry SDK configured, the API hands out no-op tracers and meters, so the calls
cost next to nothing; a user who configures an SDK gets spans and metrics with no code change.
"""

from __future__ import annotations

import time
from importlib.metadata import PackageNotFoundError, version

from opentelemetry import metrics, trace

SCOPE = "tether"

try:
    # As tether.__version__: the version in pyproject.toml, as installed.
    VERSION = version("tether")
except PackageNotFoundError:  # imported from a source tree that was never installed
    VERSION = "0+unknown"

tracer = trace.get_tracer(SCOPE, VERSION)
meter = metrics.get_meter(SCOPE, VERSION)

_checked_at = -1.0
_enabled = False


def tracing_enabled() -> bool:
    """Whether spans would be recorded (an SDK tracer provider is installed).

    Asked once per message, so the answer is cached for a second: looking up the provider
    reads the environment each time.
    """
    global _checked_at, _enabled
    now = time.monotonic()
    if now - _checked_at > 1.0:
        provider = trace.get_tracer_provider()
        _enabled = not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
        _checked_at = now
    return _enabled
