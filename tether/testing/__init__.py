"""What users need to test their agents: a fake clock, fault injection per tool and call
number, a scripted model, and (in ``tether.testing.payments``, imported on its own because it also runs as a
separate process) a fake payments service that honors idempotency keys and counts refunds, and
``check_store``, the integrity check of a store (``tether check``) for the end of a test."""

from tether.testing.check import check_store as check_store
from tether.testing.check import check_store_async as check_store_async
from tether.testing.clock import FakeClock as FakeClock
from tether.testing.faults import FaultInjector as FaultInjector
from tether.testing.model import ScriptedModel as ScriptedModel

__all__ = (
    "FakeClock",
    "FaultInjector",
    "ScriptedModel",
    "check_store",
    "check_store_async",
)
