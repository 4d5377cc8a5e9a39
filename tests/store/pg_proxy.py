"""A TCP relay between the store and its PostgreSQL server that can cut the network silently.

``cut()`` closes the store's side of every relayed connection and stops relaying, leaving the
server's side open and silent: the server hears nothing, as when a network between two
hosts goes down (no FIN or RST reaches it). A backend that was in a transaction then sits
"idle in transaction" until ``idle_in_transaction_session_timeout`` (or its TCP keepalives)
ends it; the store, for its part, sees its connection broken at once and reconnects through
the relay.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import urllib.parse


class SilentCut:
    """Relays 127.0.0.1:``port`` to ``target`` (host, port) until ``close``."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._silenced: list[socket.socket] = []  # servers' sides of cut connections
        self.cuts = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, url: str) -> str:
        """``url`` (a postgresql:// URL of the target) through this relay."""
        parts = urllib.parse.urlsplit(url)
        user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
        return parts._replace(netloc=f"{user}127.0.0.1:{self.port}").geturl()

    def cut(self) -> None:
        """Cut every relayed connection silently (module docstring)."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
            self.cuts += 1
            for client, server in pairs:
                self._silenced.append(server)  # kept open: the server hears nothing
                with contextlib.suppress(OSError):
                    client.shutdown(socket.SHUT_RDWR)
                client.close()

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            for sock in [s for pair in self._pairs for s in pair] + self._silenced:
                with contextlib.suppress(OSError):
                    sock.close()
            self._pairs, self._silenced = [], []

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            with self._lock:
                self._pairs.append((client, server))
            threading.Thread(target=self._pipe, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, to_server: bool) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            with self._lock:
                silenced = (dst if to_server else src) in self._silenced
            if silenced or not data:
                # Cut: nothing more goes to the server, nothing is closed on its side. Else
                # the peer closed: close the other side too (a normal disconnect).
                if not silenced:
                    with contextlib.suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)
                return
            try:
                dst.sendall(data)
            except OSError:
                return
