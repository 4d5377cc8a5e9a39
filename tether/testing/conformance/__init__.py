"""The ``Store`` conformance suite: every backend, ours or another package's, passes it.

It checks the contracts the runtime relies on (``tether.store.protocol``) on a real store:
atomic batches (I2), dedup (I1), dead letters (I7), leases and fencing inside the write (I8),
the effects ledger (I4), approvals (I9) and the audit log written with their decisions, the
message cursor, leases on the store's clock, and
the same-host shortcut. It needs pytest and anyio's pytest plugin (installed with anyio).

Run it on a backend with one fixture, ``store_target``, in a test module of your package::

    # tests/test_tether_conformance.py
    import pytest
    from tether.testing.conformance import *  # noqa: F403  (the suite's tests and fixtures)
    from tether.testing.conformance import StoreTarget

    @pytest.fixture
    def store_target(postgresql_url: str) -> StoreTarget:  # a fresh, empty database per test
        return StoreTarget(postgresql_url, own_clock=True, hold_open=my_hold_open)

``StoreTarget`` says what the suite must know of the backend: the URL ``open_store`` opens,
its options, whether it judges leases on a clock of its own, and how to hold a write open
while others commit. Our own tests run the suite on the memory and SQLite stores through the
same fixture, parametrised over ``TARGETS`` (``tests/store/test_store_conformance.py``).
"""

from __future__ import annotations

import inspect

import pytest

# Rewrite the submodules' asserts, as pytest does a test module's (this package itself is
# being imported already: naming it would only warn).
pytest.register_assert_rewrite(
    *(
        f"tether.testing.conformance.{name}"
        for name in (
            "actors",
            "audit",
            "batches",
            "clock",
            "cursor",
            "dead_letters",
            "fencing",
            "hosts",
            "leases",
            "ledger",
            "mail",
            "parks",
            "reads",
            "reuse",
            "steps",
            "support",
        )
    )
)

from tether.testing.conformance.actors import *  # noqa: E402, F403
from tether.testing.conformance.audit import *  # noqa: E402, F403
from tether.testing.conformance.batches import *  # noqa: E402, F403
from tether.testing.conformance.clock import *  # noqa: E402, F403
from tether.testing.conformance.cursor import *  # noqa: E402, F403
from tether.testing.conformance.dead_letters import *  # noqa: E402, F403
from tether.testing.conformance.fencing import *  # noqa: E402, F403
from tether.testing.conformance.hosts import *  # noqa: E402, F403
from tether.testing.conformance.leases import *  # noqa: E402, F403
from tether.testing.conformance.ledger import *  # noqa: E402, F403
from tether.testing.conformance.mail import *  # noqa: E402, F403
from tether.testing.conformance.parks import *  # noqa: E402, F403
from tether.testing.conformance.reads import *  # noqa: E402, F403
from tether.testing.conformance.reuse import *  # noqa: E402, F403
from tether.testing.conformance.steps import *  # noqa: E402, F403
from tether.testing.conformance.support import (  # noqa: E402
    TARGETS,
    HoldOpen,
    LeaseTime,
    StoreTarget,
    anyio_backend,
    lease_time,
    second_store,
    store,
    store_target,
)

_TESTS = sorted(
    name
    for name, value in list(globals().items())
    if name.startswith("test_") and inspect.iscoroutinefunction(value)
)
for _name in _TESTS:  # each test carries its mark: it runs in the importing module
    globals()[_name] = pytest.mark.anyio(globals()[_name])

#: What ``from tether.testing.conformance import *`` brings into a test module: the tests,
#: and the fixtures they use (``store_target`` is the one to override).
__all__ = [
    *_TESTS,
    "TARGETS",
    "HoldOpen",
    "LeaseTime",
    "StoreTarget",
    "anyio_backend",
    "lease_time",
    "second_store",
    "store",
    "store_target",
]
