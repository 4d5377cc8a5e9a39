"""``tether.mcp.tools`` against a real MCP server (``tests/mcp/server.py``) in a subprocess,
over stdio and over streamable HTTP: what the model sees, what the server receives (its own
SQLite file), how errors and a dying server are told to the session."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

import tether
import tether.mcp
from tests.mcp import agents, world
from tests.mcp.agents import plan

pytestmark = pytest.mark.anyio

ASK = 60.0


def runtime(tmp_path: Path) -> tether.Runtime:
    return tether.Runtime(tmp_path / "agents.db", poll_interval=0.02)


async def run_task(
    tmp_path: Path, name: str, tools: Sequence[tether.Tool], task: tether.UserMessage
) -> tether.TaskResult:
    cls = agents.session_class(name, tools)
    async with runtime(tmp_path) as rt:
        session = await rt.spawn(cls, "s1", goal="look after orders")
        result: tether.TaskResult = await session.ask(task, timeout=ASK)
        return result


def test_the_tools_keep_the_servers_names_descriptions_schemas_and_hints(tmp_path: Path) -> None:
    db = tmp_path / "server.db"
    found = {t.name: t for t in tether.mcp.tools(world.stdio_server(db))}
    assert set(found) == {
        "lookup_order",
        "charge",
        "delete_order",
        "fail_order",
        "flaky_lookup",
        "slow_lookup",
        "hold_order",
        "order_history",
        "order_label",
        "order_checksum",
        "ship",
    }
    lookup, charge, delete = found["lookup_order"], found["charge"], found["delete_order"]
    assert lookup.description == "Look up an order's status."
    assert lookup.spec()["input_schema"]["properties"] == {
        "order_id": {"title": "Order Id", "type": "string"}
    }
    # the key argument is the runtime's: the model never sees it
    assert set(charge.spec()["input_schema"]["properties"]) == {"order_id", "amount_cents"}
    # recovery and approval from the server's annotations
    assert (lookup.recovery, lookup.requires_approval) == ("retry", False)  # readOnlyHint
    assert (charge.recovery, charge.requires_approval) == ("retry", False)  # idempotentHint
    assert (delete.recovery, delete.requires_approval) == ("quarantine", True)  # destructive
    assert (found["fail_order"].recovery, found["fail_order"].requires_approval) == (
        "quarantine",
        False,
    )
    assert world.calls(db) == []  # listing calls nothing


def test_options_prefix_and_only_override_what_the_server_says(tmp_path: Path) -> None:
    server = world.stdio_server(tmp_path / "server.db")
    made = tether.mcp.tools(
        server,
        prefix="shop_",
        only=["lookup_order", "delete_order"],
        options={"delete_order": {"requires_approval": False, "timeout": 5}},
        defaults={"breaker": None},
    )
    by_name = {t.name: t for t in made}
    assert set(by_name) == {"shop_lookup_order", "shop_delete_order"}
    delete = by_name["shop_delete_order"]
    assert (delete.recovery, delete.requires_approval, delete.timeout) == ("quarantine", False, 5)
    assert all(t.breaker is None for t in made)
    with pytest.raises(tether.ConfigError, match="does not list: nope"):
        tether.mcp.tools(server, options={"nope": {}})
    with pytest.raises(tether.ConfigError, match="unknown option"):
        tether.mcp.tools(server, options={"charge": {"recovry": "retry"}})


async def test_arguments_that_do_not_fit_the_schema_are_refused_before_anything_is_recorded(
    tmp_path: Path,
) -> None:
    db = tmp_path / "server.db"
    tools = await tether.mcp.load_tools(world.stdio_server(db))
    with pytest.raises(tether.TaskFailed, match="invalid tool call twice") as failed:
        await run_task(tmp_path, "BadArgs", tools, plan(("lookup_order", {"order_id": 42})))
    first = failed.value.result.calls[0]
    assert first.effect_key is None  # nothing recorded
    assert first.error is not None
    assert "42 is not of type 'string' - at `$.order_id`" in first.error
    assert world.calls(db) == []  # nothing sent


async def test_a_call_over_stdio_carries_the_runtime_key_in_meta_and_in_the_key_argument(
    tmp_path: Path,
) -> None:
    db = tmp_path / "server.db"
    tools = await tether.mcp.load_tools(world.stdio_server(db))
    task = plan(
        ("lookup_order", {"order_id": "42"}), ("charge", {"order_id": "42", "amount_cents": 1500})
    )
    result = await run_task(tmp_path, "Stdio", tools, task)
    lookup, charge = result.calls
    assert lookup.result == json.dumps({"result": "order 42: shipped"}, separators=(",", ":"))
    assert charge.result is not None
    assert "charged 1500 cents on order 42" in charge.result
    served = world.calls(db)
    assert [c["tool"] for c in served] == ["lookup_order", "charge"]
    assert served[0]["meta_key"] == lookup.effect_key
    assert served[1]["meta_key"] == served[1]["arg_key"] == charge.effect_key
    assert world.charges(db) == ["charged 1500 cents on order 42"]


async def test_a_call_over_streamable_http_carries_the_runtime_key_in_meta(tmp_path: Path) -> None:
    db = tmp_path / "server.db"
    with world.http_server(db, tmp_path / "http.log") as server:
        tools = await tether.mcp.load_tools(
            tether.mcp.HttpServer(server.url, wait_connected=world.DEADLINE)
        )
        task = plan(("charge", {"order_id": "7", "amount_cents": 300}))
        result = await run_task(tmp_path, "Http", tools, task)
    [charge] = result.calls
    assert charge.result is not None
    assert "charged 300 cents on order 7" in charge.result
    [served] = world.calls(db)
    assert served["meta_key"] == served["arg_key"] == charge.effect_key


async def test_a_call_to_an_http_server_that_went_away_is_not_carried_out(tmp_path: Path) -> None:
    db = tmp_path / "server.db"
    with world.http_server(db, tmp_path / "http.log") as server:
        tools = await tether.mcp.load_tools(
            tether.mcp.HttpServer(server.url, wait_connected=2.0),
            # one attempt per call, no breaker: the session is told of each call's outcome
            defaults={"retry": tether.RetryPolicy(max_attempts=1), "breaker": None},
        )
        cls = agents.session_class("HttpGone", tools)
        async with runtime(tmp_path) as rt:
            session = await rt.spawn(cls, "s1", goal="look after orders")
            task = plan(("lookup_order", {"order_id": "1"}))
            first = await session.ask(task, timeout=ASK)
            server.kill()
            # fail_order has no hints: a call that may have been made would be held
            second = await session.ask(plan(("fail_order", {"order_id": "2"})), timeout=ASK)
            held = await rt.quarantine.list()
    assert first.calls[0].error is None
    assert [c.tool for c in second.calls] == ["fail_order", "fail_order"]
    world.assert_not_sent(second.calls)
    assert held == []
    assert [c["tool"] for c in world.calls(db)] == ["lookup_order"]


async def test_an_error_result_is_a_recorded_failure_the_model_sees_and_never_retried(
    tmp_path: Path,
) -> None:
    db = tmp_path / "server.db"
    tools = await tether.mcp.load_tools(world.stdio_server(db))
    result = await run_task(tmp_path, "Fails", tools, plan(("fail_order", {"order_id": "9"})))
    # the model was told, and asked once more (a new call): each call ran once
    assert [c.tool for c in result.calls] == ["fail_order", "fail_order"]
    for call in result.calls:
        assert call.error is not None
        assert "McpToolError" in call.error
        assert call.effect_key is not None
    assert [c["meta_key"] for c in world.calls(db)] == [c.effect_key for c in result.calls]


async def test_a_destructive_tool_waits_for_a_person_and_runs_once_approved(tmp_path: Path) -> None:
    db = tmp_path / "server.db"
    tools = await tether.mcp.load_tools(world.stdio_server(db))
    cls = agents.session_class("Deletes", tools)
    async with runtime(tmp_path) as rt:
        session = await rt.spawn(cls, "s1", goal="look after orders")
        await session.tell(plan(("delete_order", {"order_id": "5"})))
        with anyio.fail_after(world.DEADLINE):
            while not (pending := await rt.approvals.pending()):
                await anyio.sleep(0.02)
        [request] = pending
        assert (request.tool, request.args) == ("delete_order", {"order_id": "5"})
        assert world.calls(db) == []  # held: nothing ran
        await rt.approvals.decide(request.request_id, tether.Approve(by="alice"))
        with anyio.fail_after(world.DEADLINE):
            while not world.calls(db):
                await anyio.sleep(0.02)
    assert [c["tool"] for c in world.calls(db)] == ["delete_order"]


async def test_a_server_killed_mid_task_is_restarted_and_the_task_finishes(tmp_path: Path) -> None:
    db = tmp_path / "server.db"
    server = world.stdio_server(db)
    # one attempt per call: the session itself is told that the call failed
    tools = await tether.mcp.load_tools(
        server, options={"flaky_lookup": {"retry": tether.RetryPolicy(max_attempts=1)}}
    )
    cls = agents.session_class("Flaky", tools)
    async with runtime(tmp_path) as rt:
        session = await rt.spawn(cls, "s1", goal="look after orders")
        result = await session.ask(plan(("flaky_lookup", {"order_id": "3"})), timeout=ASK)
        tree = await rt.tree()
    failed, answered = result.calls
    assert failed.error is not None
    assert "McpConnectionLost" in failed.error
    assert "after the request was sent" in failed.error
    assert answered.result is not None
    assert "order 3: shipped" in answered.result
    first, second = world.calls(db, "flaky_lookup")
    assert first["pid"] != second["pid"]  # the server died, and another was started
    node = next(n for root in tree if (n := root.find(tether.mcp.connection_id(server.name))))
    assert node.restart_count >= 1
    assert node.detail is not None
    assert node.detail.startswith("connected")


async def test_a_server_that_cannot_start_fails_the_call_as_not_sent_and_never_hangs_the_session(
    tmp_path: Path,
) -> None:
    db = tmp_path / "server.db"
    server = world.stdio_server(db, wait_connected=1.0)  # a call's wait for a server down
    tools = await tether.mcp.load_tools(
        server,
        # no breaker: each call is made (and fails as not sent), not refused by a breaker
        options={"charge": {"retry": tether.RetryPolicy(max_attempts=2), "breaker": None}},
    )
    await anyio.Path(f"{db}.down").touch()  # from now on the server exits as it starts
    task = plan(("charge", {"order_id": "1", "amount_cents": 100}))
    result = await run_task(tmp_path, "Down", tools, task)
    assert [c.tool for c in result.calls] == ["charge", "charge"]  # told, and tried again
    world.assert_not_sent(result.calls)
    assert world.calls(db) == []


async def test_a_tool_called_directly_connects_for_that_call(tmp_path: Path) -> None:
    db = tmp_path / "server.db"
    lookup = next(
        t for t in await tether.mcp.load_tools(world.stdio_server(db)) if t.name == "lookup_order"
    )
    assert await lookup(order_id="8") == {"result": "order 8: shipped"}
    [served] = world.calls(db)
    assert served["meta_key"].startswith("direct-")  # outside the ledger: a key of its own
