"""Several hosts on one machine: network namespaces joined to this one by veth pairs, and a
throwaway PostgreSQL cluster listening on this side of each pair.

Each host is a namespace ``tth<run>-<name>`` with one veth pair: ``th<run><n>r`` here, with
``10.77.<net>.1/24``, and its peer inside the namespace with ``10.77.<net>.2/24``. The
addresses exist only inside this machine (a /24 of 10.77.0.0/16 no interface here uses yet),
nothing is routed beyond the pairs, and the names carry a random run id, so two runs never
meet. Cutting a host off is ``ip link set <this side> down``; everything is removed on exit,
failed test or not (deleting a namespace deletes its end of the pair, and with it the pair).

Processes run in a host as ``ip netns exec NS unshare --uts --pid --fork --kill-child
--mount-proc``: their own network, hostname and pid namespace (a runtime there registers a
host identity of its own, so no other host ever judges it by its pid), and SIGKILL of the
``unshare`` process takes everything in the namespace with it.

Needs root, ``ip``, ``unshare`` and PostgreSQL's server binaries (``initdb`` runs as the
``postgres`` user: it refuses root). ``unavailable()`` says what is missing.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from glob import glob
from pathlib import Path

import msgspec


class Host(msgspec.Struct, frozen=True):
    name: str  # "a", "b": also its hostname
    netns: str
    outside: str  # this side of the pair (the link a test sets down)
    server_address: str  # this side's address: where the host reaches the machine
    address: str  # the host's own address


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


def _pg_bin() -> Path | None:
    found = sorted(glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def unavailable() -> str | None:
    """Why several hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "unshare", "runuser"):
        if shutil.which(tool) is None:
            return f"no {tool} command"
    if _pg_bin() is None:
        return "no PostgreSQL server binaries (/usr/lib/postgresql/*/bin/initdb)"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "no postgres user to run initdb as"
    return None


def _free_net() -> int:
    used = subprocess.run(["ip", "-br", "addr"], capture_output=True, text=True, check=True)
    taken = {
        int(part.split(".")[2])
        for line in used.stdout.splitlines()
        for part in line.split()[2:]
        if part.startswith("10.77.")
    }
    free = [n for n in range(10, 250) if n not in taken and n + 1 not in taken]
    if not free:
        raise RuntimeError("no free /24 left in 10.77.0.0/16")
    return free[secrets.randbelow(len(free))]


@contextlib.contextmanager
def hosts(names: Sequence[str]) -> Iterator[dict[str, Host]]:
    """Namespaces for ``names`` (see the module docstring), removed on exit."""
    run = secrets.token_hex(3)
    made: list[str] = []
    out: dict[str, Host] = {}
    try:
        base = _free_net()
        for n, name in enumerate(names):
            net = f"10.77.{base + n}"
            ns, outside, inside = f"tth{run}-{name}", f"th{run}{n}r", f"th{run}{n}h"
            _run("ip", "netns", "add", ns)
            made.append(ns)
            _run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
            _run("ip", "link", "set", inside, "netns", ns)
            _run("ip", "addr", "add", f"{net}.1/24", "dev", outside)
            _run("ip", "link", "set", outside, "up")
            _run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{net}.2/24", "dev", inside)
            _run("ip", "netns", "exec", ns, "ip", "link", "set", inside, "up")
            _run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            out[name] = Host(name, ns, outside, f"{net}.1", f"{net}.2")
        yield out
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=60)


def set_link(host: Host, up: bool) -> None:
    """Connect (``up``) or cut off (``not up``) ``host`` from the machine."""
    _run("ip", "link", "set", host.outside, "up" if up else "down")


def in_host(host: Host, argv: Sequence[str]) -> list[str]:
    """``argv`` run inside ``host``: its network, its hostname, its own pid namespace."""
    script = 'hostname "$0" && exec "$@"'
    return [
        "ip", "netns", "exec", host.netns,
        "unshare", "--uts", "--pid", "--fork", "--kill-child=SIGKILL", "--mount-proc",
        "sh", "-c", script, host.name, *argv,
    ]  # fmt: skip


def _free_port(addresses: Sequence[str]) -> int:
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        try:
            for address in addresses:
                with socket.socket() as s:
                    s.bind((address, port))
        except OSError:
            continue
        return port
    raise RuntimeError("no port free on every address")


@contextlib.contextmanager
def cluster(listen: Sequence[str]) -> Iterator[str]:
    """A throwaway PostgreSQL cluster listening on ``listen`` and 127.0.0.1 (trust auth from
    10.77.0.0/16 and loopback only), its server URL (``postgres`` database, on 127.0.0.1);
    stopped and deleted on exit."""
    bin_dir = _pg_bin()
    if bin_dir is None:
        raise RuntimeError("no PostgreSQL server binaries")
    pg = pwd.getpwnam("postgres")
    root = Path(tempfile.mkdtemp(prefix="tether-hosts-pg-"))
    data = root / "data"
    os.chown(root, pg.pw_uid, pg.pw_gid)
    port = _free_port(["127.0.0.1", *listen])

    def as_postgres(*argv: str) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", *argv],
            check=True,
            capture_output=True,
            timeout=120,
            cwd=root,
        )

    try:
        as_postgres(str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres")
        conf = (
            f"listen_addresses = '{','.join(['127.0.0.1', *listen])}'\n"
            f"port = {port}\nunix_socket_directories = '{root}'\n"
            "max_connections = 100\nfsync = on\n"
        )
        with (data / "postgresql.conf").open("a") as f:
            f.write(conf)
        with (data / "pg_hba.conf").open("a") as f:
            f.write("host all all 10.77.0.0/16 trust\nhost all all 127.0.0.1/32 trust\n")
        log = root / "server.log"
        as_postgres(str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "start")
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        with contextlib.suppress(subprocess.SubprocessError):
            as_postgres(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(root, ignore_errors=True)


def wait_port(address: str, port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((address, port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
