"""The console's access tokens: a file of users, roles and token hashes, never tokens.

``tether console token add USER --role view|approve --tokens FILE`` prints a new token once
and stores only its SHA-256 (a token is 32 random bytes: a fast hash of it cannot be
searched, unlike a password's). The file is JSON, written atomically with mode 0600::

    {"tokens": [{"id": "k3J9…", "user": "alice", "role": "approve",
                 "sha256": "…", "created": 1717171717.0}]}

A token looks like ``tct_<id>_<secret>``: its id finds its entry without comparing every
hash, and its secret is compared in constant time. Revoking a user's tokens removes their
entries; a console reads the file again when it changes, so a revoked token stops working at
once, sessions made with it too.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tether.errors import ConfigError

ROLES = ("view", "approve")
_PREFIX = "tct"


@dataclass(frozen=True)
class TokenEntry:
    id: str
    user: str
    role: str
    sha256: str
    created: float


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _check_user(user: str) -> str:
    if not (isinstance(user, str) and user.strip()) or len(user) > 100 or "\n" in user:
        raise ConfigError(f"a user name is 1 to 100 characters on one line, not {user!r}")
    return user.strip()


class TokenFile:
    """The token file at ``path``, read again whenever it changes on disk."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._seen: tuple[float, int] | None = None
        self._entries: dict[str, TokenEntry] = {}

    def entries(self) -> list[TokenEntry]:
        self._reload()
        return sorted(self._entries.values(), key=lambda e: (e.user, e.created))

    def verify(self, token: str) -> TokenEntry | None:
        """The entry ``token`` belongs to, or None (unknown, malformed, revoked)."""
        parts = token.split("_") if isinstance(token, str) else []
        if len(parts) != 3 or parts[0] != _PREFIX:
            return None
        self._reload()
        entry = self._entries.get(parts[1])
        if entry is None or not hmac.compare_digest(entry.sha256, _hash(parts[2])):
            return None
        return entry

    def get(self, token_id: str) -> TokenEntry | None:
        """The entry with id ``token_id`` if it is still in the file (not revoked)."""
        self._reload()
        return self._entries.get(token_id)

    def add(self, user: str, role: str) -> str:
        """Store a new token for ``user`` with ``role``; the token, which is not kept."""
        if role not in ROLES:
            raise ConfigError(f"a role is one of {ROLES}, not {role!r}")
        user = _check_user(user)
        token_id = secrets.token_urlsafe(9).replace("_", "x").replace("-", "y")
        secret = secrets.token_urlsafe(32).replace("_", "x")
        entries = self._read() if self.path.exists() else []
        entries.append(TokenEntry(token_id, user, role, _hash(secret), time.time()))
        self._write(entries)
        return f"{_PREFIX}_{token_id}_{secret}"

    def revoke(self, user: str) -> int:
        """Remove every token of ``user``; how many went."""
        entries = self._read() if self.path.exists() else []
        kept = [e for e in entries if e.user != user]
        if len(kept) != len(entries):
            self._write(kept)
        return len(entries) - len(kept)

    def _reload(self) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError as exc:
            raise ConfigError(f"no token file at {str(self.path)!r}") from exc
        seen = (st.st_mtime, st.st_size)
        if seen != self._seen:
            self._entries = {e.id: e for e in self._read()}
            self._seen = seen

    def _read(self) -> list[TokenEntry]:
        try:
            data = json.loads(self.path.read_text())
            return [
                TokenEntry(
                    str(e["id"]),
                    str(e["user"]),
                    str(e["role"]),
                    str(e["sha256"]),
                    float(e["created"]),
                )
                for e in data["tokens"]
            ]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"token file {str(self.path)!r} cannot be read: {exc}") from exc

    def _write(self, entries: list[TokenEntry]) -> None:
        data = {"tokens": [e.__dict__ for e in entries]}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        try:
            os.fchmod(fd, 0o600)  # hashes only, but nobody else's business
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=2)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
