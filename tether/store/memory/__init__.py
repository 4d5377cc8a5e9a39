"""The memory store: in process, non-durable, for tests (``tether.store.memory.store``)."""

from tether.store.memory.store import MemoryStore as MemoryStore

__all__ = ("MemoryStore",)
