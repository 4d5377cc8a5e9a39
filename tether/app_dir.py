"""``--app-dir``: where the commands (``tether``, ``tether console``) find the application.

The store names the application's actor classes and tools by module, and the ``tether``
script's own ``sys.path`` holds neither the current directory nor the application's; so both
commands put the given directory first on ``sys.path``, as uvicorn's ``--app-dir`` does.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tether.errors import ConfigError


def use_app_dir(app_dir: str) -> None:
    """Put ``app_dir`` first on ``sys.path``; ``ConfigError`` if it is not a directory."""
    path = Path(app_dir)
    if not path.is_dir():
        raise ConfigError(f"--app-dir {app_dir!r} is not a directory")
    resolved = str(path.resolve())
    if resolved not in sys.path:
        sys.path.insert(0, resolved)
