"""The storage seam: the ``Store`` protocol, its records, and stores opened by URL.

A layer of its own: it imports only ``tether.errors`` and its own modules, and
``tether.runtime`` imports it, never the reverse. The runtime imports no backend: it opens
one with ``open_store(url)``, which finds it by scheme (``open.py``).

* ``records``   the rows and writes that cross the seam
* ``protocol``  ``Store``, its contracts, and its declared fast path (``ImmediateWrites``)
* ``admin``     ``StoreAdmin``: what an administration process reads
* ``open``      ``open_store``, ``register_backend``, the ``tether.stores`` entry points
* ``hosts``     host identity, and the same-host "has that process exited" shortcut
* ``memory``, ``sqlite``  the built-in backends
"""

from tether.store.admin import StoreAdmin as StoreAdmin
from tether.store.open import open_store as open_store
from tether.store.open import register_backend as register_backend
from tether.store.protocol import ImmediateWrites as ImmediateWrites
from tether.store.protocol import Store as Store

__all__ = ("ImmediateWrites", "Store", "StoreAdmin", "open_store", "register_backend")
