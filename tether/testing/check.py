"""``check_store(path)``: ``tether check`` for a test suite, on a store at rest.

Call it at the end of a test, once every runtime on the store has closed::

    report = tether.testing.check_store("agents.db")
    assert report.ok, report.summary()

``check_store`` blocks (it runs its own event loop); inside an async test, ``await
check_store_async(path)``. Both return the ``CheckReport`` whatever it finds; neither writes.
"""

from __future__ import annotations

import asyncio
import os

import anyio

from tether.errors import ConfigError
from tether.runtime.check import CheckReport, check_runtime_store
from tether.runtime.runtime import Runtime
from tether.store.open import open_store


async def check_store_async(path: str | os.PathLike[str]) -> CheckReport:
    """Check the store at ``path`` (a file or a store URL, as ``tether.open_store`` takes); a
    store that does not exist is an error (``StoreOpenError``), never created."""
    url = os.fspath(path)
    async with Runtime(store=open_store(url, create=False), serve=False) as rt:
        return await check_runtime_store(rt, name=url)


def check_store(path: str | os.PathLike[str]) -> CheckReport:
    """``check_store_async`` from synchronous code (not inside a running event loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(check_store_async, path)
    raise ConfigError("check_store() blocks: inside an async test, await check_store_async(path)")
