"""The ``Store`` conformance suite (``tether.testing.conformance``) on our own backends.

The suite's ``store_target`` fixture is parametrised over ``TARGETS``: every test runs once on
an opened ``SqliteStore`` (a file under ``tmp_path``) and once on an opened ``MemoryStore``,
both opened through ``open_store`` as any backend is.
"""

from tether.testing.conformance import *  # noqa: F403
