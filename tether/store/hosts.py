"""Host identity, and "has that runtime's process exited": a same-host shortcut only.

A runtime that dies holding leases leaves them until they expire. When it died on *this*
host, another runtime can tell at once — its pid is gone, or now belongs to a process that
started at another time — and free them (``Runtime._reap_dead_runtimes``, ``tether
migrate``'s "is anyone still using this store"). That question only makes sense where the pid
means the same process: in one pid namespace, on one boot of one kernel. A hostname does not
say so (two containers may share one, each with its own pids; a host reboots and reuses every
pid), so a runtime registers under ``this_host()``:

    ``<hostname> boot=<kernel boot id> pidns=<device>:<inode of the pid namespace>``

and only a runtime registered under the very same identity is ever judged by its pid. Any
other — another machine, another container, this machine before a reboot, a row written by
an older tether with a bare hostname — is left to its lease's expiry on the store's clock.

Where the identity cannot be established (no ``/proc``: not Linux; a ``/proc`` mounted from
another pid namespace than this process's), ``this_host()`` is unique to this process, so
the shortcut never applies to anyone else: never wrong, only slower.
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

_cached: tuple[int, str] | None = None  # (pid it was computed in, identity)


def this_host() -> str:
    """The identity of the pid namespace this process runs in, on this boot of this kernel
    (see the module docstring). Computed again in a forked child."""
    global _cached
    pid = os.getpid()
    if _cached is None or _cached[0] != pid:
        _cached = (pid, _identity(pid))
    return _cached[1]


def _identity(pid: int) -> str:
    hostname = socket.gethostname()
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        ns = os.stat("/proc/self/ns/pid")
        # /proc must show this namespace's pids, or a pid read there is another process.
        seen_as = int(os.readlink("/proc/self"))
    except (OSError, ValueError):
        boot, seen_as = "", -1
    if not boot or seen_as != pid:
        return f"{hostname} process={uuid.uuid4().hex}"
    return f"{hostname} boot={boot} pidns={ns.st_dev}:{ns.st_ino}"


def hostname_of(host: str) -> str:
    """The hostname part of a host identity, for people to read."""
    return host.split(" ", 1)[0]


def runtime_gone(host: str, pid: int, started: float) -> bool:
    """Whether a runtime registered under ``host`` with process ``pid`` started at ``started``
    is known to have exited: only ever True for a runtime of this very host identity (the
    same-host shortcut); a runtime of any other host is never judged here."""
    return host == this_host() and process_gone(pid, started)


def process_gone(pid: int, started: float) -> bool:
    """Whether the process ``pid`` of this pid namespace, started at ``started``, has exited
    (a live process under a reused pid started at another time)."""
    start = process_start(pid)
    return start is None or bool(start and started and abs(start - started) > 1.0)


def process_start(pid: int) -> float | None:
    """When process ``pid`` of this pid namespace started (seconds since the epoch), None if
    it does not exist, 0.0 if it exists but its start time cannot be read (not Linux)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime")
        )
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return 0.0  # alive, start time unknown: only lease expiry can free its actors
