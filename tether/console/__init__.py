"""The web approval console: ``pip install 'tether[console]'``, then ``tether console``.

People approve, reject or modify held calls in a browser, as themselves: the identity that
decides comes from authentication (tokens with roles, or a trusted proxy's header), never
from a form field. The console opens the store as the CLI does and decides through
``rt.approvals``, so fingerprints, versions, deadlines, quorums and the audit log are the
runtime's own. A JSON API beside the pages serves scripts and bridges. See
``docs/console.md``.

Modules: ``config`` (settings), ``tokens`` (the token file), ``auth`` (who is asking),
``csrf``, ``views`` (what pages show), ``timeline`` (a session drawn), ``actions`` (the
changes, through the runtime), ``pages``, ``api``, ``app`` (the ASGI app), ``server``
(uvicorn) and ``command`` (``tether console``).
"""

from __future__ import annotations

from tether.console.app import create_app as create_app
from tether.console.config import ConsoleConfig as ConsoleConfig

__all__ = ["ConsoleConfig", "create_app"]
