"""The ``tether`` command: look into a store and act on what waits for a person.

Every command but ``demo``, ``console`` and ``migrate`` opens the store at ``--db`` (a path or
a store URL, as ``tether.open_store`` takes; default: ``$TETHER_DB``, else ``tether.db``) for
administration only (``Runtime(serve=False)``): no actor runs in this process, and what it
reads goes through ``StoreAdmin``. The application's classes and tools are imported by the
names the store holds, with ``--app-dir`` (default: the current directory) first on
``sys.path``. ``migrate`` upgrades the store itself, offline. Decisions, resolutions and
retries are stored; the runtimes serving the store pick them up. A missing store is an error,
never a new empty store (the store is opened with ``create=False``).

Exit codes: 0 done; 1 the operation failed (unknown id, closed request, invalid tool
arguments, unreadable store; ``check``: a violation found); 2 the command line is wrong; 130
interrupted.

One module per command group (``sessions``: actors, sessions, show, tree; ``check``; ``approvals``;
``quarantine``; ``dead_letters``; ``audit``; ``migrate``; ``console``; ``demo``), each with a
``register(commands)`` that declares its commands on the parser; ``app`` lists the groups and
runs the command line. What the commands show of a store is read and formatted by
``tether.render``, which the console shares.
"""

from tether.cli.app import main

__all__ = ["main"]
