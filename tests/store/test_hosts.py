"""The same-host shortcut (``tether.store.hosts``): a runtime judges another by its pid only
when both run in one pid namespace on one boot of one kernel — never by hostname alone.

Real processes in real pid namespaces (``unshare``, as a container gets them): a runtime whose
pid means something else here keeps its leases.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

import tether
from tether.store.hosts import hostname_of, runtime_gone, this_host

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.anyio

_PRINT_HOST = "from tether.store.hosts import this_host; print(this_host())"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _unshare(*flags: str) -> list[str]:
    """The command that runs a program in a new pid namespace (skips the test where none can
    be made: unprivileged, or no util-linux)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1) here")
    probe = subprocess.run(
        [unshare, "--pid", "--fork", *flags, "true"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot make a pid namespace here: {probe.stderr.decode().strip()}")
    return [unshare, "--pid", "--fork", *flags, "--kill-child"]


def _host_in(*command: str) -> str:
    done = subprocess.run(
        [*command, sys.executable, "-c", _PRINT_HOST],
        capture_output=True,
        text=True,
        env=_env(),
        check=True,
    )
    return done.stdout.strip()


def test_the_host_identity_names_the_boot_and_the_pid_namespace() -> None:
    """This host's identity holds its hostname, the kernel's boot id and the inode of this
    process's pid namespace; another process of the same namespace has the same one."""
    import socket

    host = this_host()
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    ns = os.stat("/proc/self/ns/pid")
    assert host == f"{socket.gethostname()} boot={boot} pidns={ns.st_dev}:{ns.st_ino}"
    assert hostname_of(host) == socket.gethostname()
    assert _host_in() == host


def test_a_process_in_another_pid_namespace_is_another_host() -> None:
    """Same hostname, same boot, another pid namespace (as in a container): another identity."""
    theirs = _host_in(*_unshare("--mount-proc"))
    assert theirs != this_host()
    assert hostname_of(theirs) == hostname_of(this_host())
    assert theirs.split(" pidns=")[0] == this_host().split(" pidns=")[0]  # same boot


def test_a_proc_of_another_pid_namespace_gives_an_identity_no_one_shares() -> None:
    """In a pid namespace whose /proc still shows the outer one's pids, a pid read there is
    another process: the identity is then unique to the process, so no shortcut applies."""
    first = _host_in(*_unshare())
    second = _host_in(*_unshare())
    assert "process=" in first
    assert first != second


def test_a_runtime_of_another_host_is_never_judged_by_its_pid() -> None:
    """runtime_gone is False for a runtime of any other identity, even with a pid that does not
    exist here; True for this identity's pid that exited."""
    gone_pid = 2**22 + 17  # above pid_max's default: no process has it
    assert runtime_gone(this_host(), gone_pid, 1.0)
    assert not runtime_gone(hostname_of(this_host()), gone_pid, 1.0)
    assert not runtime_gone("elsewhere boot=x pidns=0:1", gone_pid, 1.0)
    assert not runtime_gone(this_host(), os.getpid(), 0.0)  # alive


_HOLDER = """
import sys
import anyio
import tether
from tests import sample_actors as s

async def main(db):
    async with tether.Runtime(db, lease_ttl=3600.0, poll_interval=0.05) as rt:
        await rt.spawn(s.Account, "held")
        print(rt.runtime_id, flush=True)
        await anyio.sleep(3600)

anyio.run(main, sys.argv[1])
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A runtime in a pid namespace of its own (pid 1 there) under this hostname, holding the
    actor "held" on a store file: (the file, its runtime id). Killed after the test."""
    db = tmp_path / "shared.db"
    process = subprocess.Popen(
        [*_unshare("--mount-proc"), sys.executable, "-c", _HOLDER, str(db)],
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=ROOT,
    )
    try:
        assert process.stdout is not None
        runtime_id = process.stdout.readline().strip()
        assert runtime_id, "the holder runtime did not start"
        yield db, runtime_id
    finally:
        process.kill()  # unshare --kill-child takes pid 1 of the namespace with it
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


async def test_a_live_runtime_in_another_pid_namespace_keeps_its_leases(
    holder: tuple[Path, str],
) -> None:
    """A runtime in its own pid namespace (pid 1 there; pid 1 here is init, started at another
    time) under the same hostname holds an actor. A runtime opening here must not take it for
    dead: its row and its lease stay. (Judged by hostname, it was reaped and its actor taken.)"""
    db, holder_id = holder
    async with tether.Runtime(db, lease_ttl=3600.0, poll_interval=0.05) as rt:
        for _ in range(3):  # its open, then scheduler passes with their orphan scans
            await anyio.sleep(0.1)
            assert holder_id in {r.runtime_id for r in await rt.store.list_runtimes()}
            rec = await rt.store.get_actor("held")
            assert rec is not None
            assert rec.lease_owner == holder_id
        assert "held" not in rt.cells
