"""I4 for MCP tools under SIGKILL: the agent process is killed between the server's work and
the receipt of that work, then run again on the same store. The world is checked in the
server's own SQLite file: the read-only tool is called again, the idempotent one is called
again with the same key and does its work once, the destructive one is quarantined and never
runs twice."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.harness import Child, Children
from tests.mcp import world

pytestmark = pytest.mark.slow  # crash tests: real child processes, real signals

RUN_TIMEOUT = 90.0


@pytest.fixture
def children(tmp_path: Path) -> Iterator[Children]:
    with contextlib.closing(Children(tmp_path, module="tests.mcp.agent_program")) as started:
        yield started


def killed(
    children: Children, tool: str, db: Path, where: object, point: str = "before-receipt"
) -> None:
    """The first run: the server does the call's work, then the agent dies at ``point``."""
    first = children.start("first", tool, db, where, point)
    first.wait_report("dying", RUN_TIMEOUT)
    first.wait(RUN_TIMEOUT)
    assert first.proc.returncode == -9, first.describe()


def run_again(children: Children, tool: str, db: Path, where: object) -> Child:
    second = children.start("second", tool, db, where, "none")
    second.wait_report("finished", RUN_TIMEOUT)
    assert second.wait(RUN_TIMEOUT) == 0, second.describe()
    return second


def crash_and_rerun(
    children: Children, tool: str, tmp_path: Path, transport: str, point: str = "before-receipt"
) -> Child:
    """Kill the agent at ``point``, run it again; the server over ``transport``."""
    db, server_db = tmp_path / "agents.db", tmp_path / "server.db"
    if transport == "stdio":  # the runtime starts the server, each run its own
        killed(children, tool, db, server_db, point)
        assert [c["tool"] for c in world.calls(server_db)] == [tool]  # the work was done
        return run_again(children, tool, db, server_db)
    with world.http_server(server_db, tmp_path / "http.log") as server:  # one server for both
        killed(children, tool, db, server.url, point)
        assert [c["tool"] for c in world.calls(server_db)] == [tool]
        return run_again(children, tool, db, server.url)


@pytest.mark.parametrize(
    ("tool", "transport"),
    [("lookup_order", "stdio"), ("charge", "stdio"), ("charge", "http")],
)
def test_a_retry_tool_is_called_again_with_the_same_key_after_a_crash(
    tool: str, transport: str, tmp_path: Path, children: Children
) -> None:
    server_db = tmp_path / "server.db"
    second = crash_and_rerun(children, tool, tmp_path, transport)
    assert second.value("outcome") == "finished", second.describe()
    [[called, result, error, key]] = second.reported("calls")
    assert (called, error) == (tool, None)
    served = world.calls(server_db)
    # called again, under the key of the first call: one effect, one key
    assert [c["tool"] for c in served] == [tool, tool]
    assert [c["meta_key"] for c in served] == [key, key]
    if tool == "charge":
        assert [c["arg_key"] for c in served] == [key, key]
        # the server honours the key: the work was done once, and answered from its record
        assert world.charges(server_db) == ["charged 1500 cents on order 42"]
        assert "charged 1500 cents on order 42" in result


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_destructive_tool_is_quarantined_after_a_crash_and_never_runs_twice(
    transport: str, tmp_path: Path, children: Children
) -> None:
    server_db = tmp_path / "server.db"
    second = crash_and_rerun(children, "delete_order", tmp_path, transport)
    tool, key, reason = second.reported("quarantined")
    assert tool == "delete_order"
    assert "did not report back" in reason
    assert second.value("outcome") is None  # the task waits for a person
    served = world.calls(server_db)
    assert [c["tool"] for c in served] == ["delete_order"]  # ran once, never again
    assert served[0]["meta_key"] == key
    assert json.loads(second.value("quarantined") or "[]")[0] == "delete_order"


@pytest.mark.parametrize("tool", ["lookup_order", "charge", "delete_order"])
def test_a_call_whose_receipt_was_committed_is_replayed_from_it_after_a_crash(
    tool: str, tmp_path: Path, children: Children
) -> None:
    server_db = tmp_path / "server.db"
    second = crash_and_rerun(children, tool, tmp_path, "stdio", "after-receipt")
    assert second.value("outcome") == "finished", second.describe()
    [[called, result, error, key]] = second.reported("calls")
    assert (called, error) == (tool, None)
    # the new process listed the server's tools again and replayed the receipt: one call
    [served] = world.calls(server_db)
    assert (served["tool"], served["meta_key"]) == (tool, key)
    assert "42" in result
    # started by the two listings and the first runtime: the second never needed the server
    assert len(world.starts(server_db)) == 3
