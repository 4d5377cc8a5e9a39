"""What users need to test their actors: a fake clock (more tools arrive with effects)."""

from tether.testing.clock import FakeClock as FakeClock

__all__ = ("FakeClock",)
