"""Classes and tools another process must import: a script that defines them in ``__main__``
is warned at spawn and when such a tool is recorded, the import error says how to fix it, and
the CLI's ``--app-dir`` finds an application's modules wherever the command is run from.

Each case runs real processes: the application script (which leaves an approval request
pending in its store and exits) and the installed ``tether`` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tether
from tether.actors.actor import import_class

pytestmark = pytest.mark.slow

TOOLS = """
import tether

class Go(tether.Message):
    pass

@tether.tool(requires_approval=True, recovery="retry", breaker=None)
async def refund(order_id: str, amount_cents: int) -> str:
    return f"refunded {amount_cents}"

class Clerk(tether.Actor[int]):
    initial_state = 0

    async def handle(self, msg: Go) -> str:
        return await self.effect(refund, order_id="o1", amount_cents=100)
"""

RUN = """
import sys
import anyio
import tether

async def main() -> None:
    async with tether.Runtime(sys.argv[1], poll_interval=0.02) as rt:
        clerk = await rt.spawn(Clerk, "clerk")
        await clerk.tell(Go())
        with anyio.fail_after(30):
            while not (pending := await rt.approvals.pending()):
                await anyio.sleep(0.02)
        print(pending[0].request_id)

anyio.run(main)
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TETHER_DB")}
    env["PYTHONWARNINGS"] = "default"  # as a user's shell has it, whatever pytest configured
    return env


def run_app(script: Path, db: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, str(script), str(db)],
        cwd=script.parent,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def tether_cli(*argv: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = Path(sys.executable).with_name("tether")
    return subprocess.run(
        [str(command), *map(str, argv)],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def modify(
    db: Path, request_id: str, cwd: Path, *extra: str | Path
) -> subprocess.CompletedProcess[str]:
    args = json.dumps({"order_id": "o1", "amount_cents": 40})
    return tether_cli(
        "--db",
        db,
        *extra,
        "approvals",
        "modify",
        request_id,
        "--by",
        "ana",
        "--args",
        args,
        cwd=cwd,
    )


def test_a_script_defining_its_classes_in_main_is_warned_and_the_cli_says_how_to_fix_it(
    tmp_path: Path,
) -> None:
    script = tmp_path / "app.py"
    script.write_text(TOOLS + RUN)
    db = tmp_path / "agents.db"
    done = run_app(script, db)
    request_id = done.stdout.strip()
    warned = [line for line in done.stderr.splitlines() if "MainModuleWarning" in line]
    assert len(warned) == 2, done.stderr
    assert "actor class Clerk is defined in __main__" in warned[0]
    assert "tool refund is defined in __main__" in warned[1]
    assert "move it into a module" in warned[1]

    refused = modify(db, request_id, tmp_path)
    assert refused.returncode == 1
    assert refused.stderr.startswith("tether: error: cannot validate modified arguments")
    assert "It was defined in __main__" in refused.stderr
    assert "move it into a module" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_app_dir_puts_the_applications_modules_within_reach_of_the_cli(tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "shop_tools.py").write_text(TOOLS)
    script = app / "run.py"
    script.write_text("from shop_tools import Clerk, Go\n" + RUN)
    db = tmp_path / "agents.db"
    done = run_app(script, db)
    assert "MainModuleWarning" not in done.stderr  # the classes live in a module
    request_id = done.stdout.strip()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    lost = modify(db, request_id, elsewhere)
    assert lost.returncode == 1
    assert "No module named 'shop_tools'" in lost.stderr
    assert "--app-dir DIR" in lost.stderr

    found = modify(db, request_id, elsewhere, "--app-dir", app)
    assert found.returncode == 0, found.stderr
    assert f"{request_id}: approved (refund(" in found.stdout
    assert '"amount_cents":40' in found.stdout

    # the default app dir is the current directory, as for `python -m`
    listed = tether_cli("--db", db, "approvals", "list", "--status", "all", "--json", cwd=app)
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert row["status"] == "approved"


def test_app_dir_must_be_a_directory(tmp_path: Path) -> None:
    done = tether_cli("--app-dir", tmp_path / "missing", "actors", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("tether: error: --app-dir")


def test_importing_a_class_stored_from_main_elsewhere_says_how_to_fix_it() -> None:
    with pytest.raises(tether.ConfigError, match="It was defined in __main__") as caught:
        import_class("__main__:Clerk")
    assert "move it into a module" in str(caught.value)


def test_the_command_and_the_package_report_one_version() -> None:
    done = tether_cli("--version", cwd=Path.cwd())
    assert done.returncode == 0
    assert done.stdout == f"tether {tether.__version__}\n"
    from importlib.metadata import version

    assert tether.__version__ == version("tether") != "0+unknown"
