"""The SQLite store: the embedded default (``tether.store.sqlite.store``)."""

from tether.store.sqlite.store import Durability as Durability
from tether.store.sqlite.store import SqliteStore as SqliteStore

__all__ = ("Durability", "SqliteStore")
