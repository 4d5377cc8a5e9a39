"""``tether copy``: move a stopped store to another backend, table by table, verified by counts.

* ``tables``    what crosses: the tables, their keys, a page of rows, and ``CopyableStore``, the
  two methods a backend implements (``dump_table``, ``load_table``)
* ``run``       ``copy_store(src, dst)``: the checks before (both stopped, the destination empty),
  the pages, the counts after
* ``postgres``  the PostgreSQL store's side (``PostgresTables``), until the store has its own
"""

from tether.store.copy.run import CopyReport as CopyReport
from tether.store.copy.run import copy_store as copy_store
from tether.store.copy.tables import COPY_TABLES as COPY_TABLES
from tether.store.copy.tables import CopyableStore as CopyableStore
from tether.store.copy.tables import TableLoad as TableLoad
from tether.store.copy.tables import TablePage as TablePage

__all__ = ("COPY_TABLES", "CopyReport", "CopyableStore", "TableLoad", "TablePage", "copy_store")
