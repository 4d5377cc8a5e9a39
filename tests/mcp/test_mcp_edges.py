"""Edge cases a user of ``tether.mcp`` meets, against the real test server
(``tests/mcp/server.py``): nested schemas, hanging tools, huge results, servers that are down
or restarted, and the processes the runtime starts."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import anyio
import pytest

import tether
import tether.mcp
from tests.mcp import agents, world
from tests.mcp.agents import plan
from tether.mcp.connection import MCP_SUPERVISOR, McpSupervisor
from tether.supervisor.spec import Backoff, OneForOne

pytestmark = pytest.mark.anyio

ASK = 60.0


def runtime(tmp_path: Path, max_message_bytes: int = 1 << 20) -> tether.Runtime:
    return tether.Runtime(
        tmp_path / "agents.db", poll_interval=0.02, max_message_bytes=max_message_bytes
    )


async def tree_node(rt: tether.Runtime, actor_id: str) -> tether.TreeNode:
    """The actor ``actor_id`` in the supervision tree."""
    found = [n for root in await rt.tree() if (n := root.find(actor_id)) is not None]
    if not found:
        raise AssertionError(f"no {actor_id} in the tree")
    return found[0]


async def until_connected(rt: tether.Runtime, server: tether.mcp.McpServer) -> None:
    """Wait until the server's connection says it is connected (its supervisor restarts it,
    with backoff, while the server is down)."""
    actor_id = tether.mcp.connection_id(server.name)
    with anyio.fail_after(world.DEADLINE):
        while not ((await tree_node(rt, actor_id)).detail or "").startswith("connected"):
            await anyio.sleep(0.05)


async def test_a_nested_schema_with_defs_and_refs_is_shown_whole_and_enforced(
    tmp_path: Path,
) -> None:
    db = tmp_path / "server.db"
    tools = await tether.mcp.load_tools(world.stdio_server(db), only=["ship"])
    [ship] = tools
    shown = ship.spec()["input_schema"]
    assert shown["properties"] == {"shipment": {"$ref": "#/$defs/Shipment"}}
    assert set(shown["$defs"]) == {"Address", "Shipment"}
    bad = {"shipment": {"order_id": "4", "to": {"street": "Main St", "zip_code": 75001}}}
    good = {"shipment": {"order_id": "4", "to": {"street": "Main St", "zip_code": "75001"}}}
    cls = agents.session_class("Ships", tools)
    async with runtime(tmp_path) as rt:
        session = await rt.spawn(cls, "s1", goal="ship orders")
        with pytest.raises(tether.TaskFailed, match="invalid tool call twice") as failed:
            await session.ask(plan(("ship", bad)), timeout=ASK)
        assert world.calls(db) == []  # nothing sent
        result = await session.ask(plan(("ship", good)), timeout=ASK)
    refused = failed.value.result.calls[0]
    assert refused.effect_key is None  # refused before anything was recorded
    assert refused.error is not None
    assert "75001 is not of type 'string' - at `$.shipment.to.zip_code`" in refused.error
    [shipped] = result.calls
    assert shipped.result is not None
    assert "order 4 shipped to 75001" in shipped.result
    [served] = world.calls(db)
    assert (served["tool"], served["meta_key"]) == ("ship", shipped.effect_key)


async def test_a_hanging_call_is_cut_at_its_timeout_and_held_and_the_connection_serves_on(
    tmp_path: Path,
) -> None:
    db = tmp_path / "server.db"
    tools = await tether.mcp.load_tools(
        world.stdio_server(db), options={"hold_order": {"timeout": 1.0}}
    )
    cls = agents.session_class("Hangs", tools)
    async with runtime(tmp_path) as rt:
        hanging = await rt.spawn(cls, "s1", goal="look after orders")
        task = plan(
            ("lookup_order", {"order_id": "6"}), ("hold_order", {"order_id": "6", "seconds": 3600})
        )
        await hanging.tell(task)
        with anyio.fail_after(world.DEADLINE):
            while not (held := await rt.quarantine.list("s1")):
                await anyio.sleep(0.02)
        # the same connection serves another session's call at once
        other = await rt.spawn(cls, "s2", goal="look after orders")
        result = await other.ask(plan(("lookup_order", {"order_id": "7"})), timeout=ASK)
    [effect] = held
    assert effect.tool == "hold_order"
    [lookup] = result.calls
    assert lookup.error is None
    first, hold, looked_up = world.calls(db)
    assert first["tool"] == "lookup_order"
    assert (hold["tool"], hold["meta_key"]) == ("hold_order", effect.key)  # called once
    assert looked_up["tool"] == "lookup_order"
    assert first["pid"] == hold["pid"] == looked_up["pid"]  # one server: the timeout kept it


async def test_a_hanging_read_only_call_is_called_again_with_the_same_key_and_trips_the_breaker(
    tmp_path: Path,
) -> None:
    db = tmp_path / "server.db"
    tools = await tether.mcp.load_tools(
        world.stdio_server(db),
        options={
            "slow_lookup": {
                "timeout": 1.0,
                "retry": tether.RetryPolicy(max_attempts=2, initial_delay=0.05),
            }
        },
    )
    task = plan(
        ("lookup_order", {"order_id": "8"}), ("slow_lookup", {"order_id": "8", "seconds": 3600})
    )
    cls = agents.session_class("Slow", tools)
    async with runtime(tmp_path) as rt:
        session = await rt.spawn(cls, "s1", goal="look after orders")
        result = await session.ask(task, timeout=ASK)
    _, timed_out, refused = result.calls  # told once the retries are spent, it tries again
    assert timed_out.error is not None
    assert "failed after 2 attempt(s): TimeoutError" in timed_out.error
    # the breaker ("external_api": 3 failures in a row) opened on the third timeout
    assert refused.error is not None
    assert "circuit breaker is open" in refused.error
    served = world.calls(db, "slow_lookup")
    assert [c["meta_key"] for c in served[:2]] == [timed_out.effect_key] * 2  # the same key
    assert len(served) == 3


async def test_a_result_too_large_to_record_is_a_failure_the_model_sees(tmp_path: Path) -> None:
    db = tmp_path / "server.db"
    tools = await tether.mcp.load_tools(world.stdio_server(db))
    cls = agents.session_class("Huge", tools)
    limit = 20_000
    task = plan(
        ("order_history", {"order_id": "9", "size": 5_000}),
        ("order_history", {"order_id": "9", "size": 4 * limit}),
    )
    async with runtime(tmp_path, max_message_bytes=limit) as rt:
        session = await rt.spawn(cls, "s1", goal="look after orders")
        result = await session.ask(task, timeout=ASK)
    fits, *too_large = result.calls
    assert fits.error is None
    assert fits.result is not None
    assert "x" * 5_000 in fits.result
    assert too_large
    for call in too_large:
        assert call.error is not None
        assert f"over the runtime's max_message_bytes ({limit})" in call.error


async def test_a_loop_of_the_same_call_is_cut_before_the_server_sees_it(tmp_path: Path) -> None:
    db = tmp_path / "server.db"
    tools = await tether.mcp.load_tools(world.stdio_server(db), only=["lookup_order"])
    same = ("lookup_order", {"order_id": "1"})
    cls = agents.session_class("Loops", tools)
    async with runtime(tmp_path) as rt:
        session = await rt.spawn(cls, "s1", goal="look after orders")
        result = await session.ask(plan(same, same, same), timeout=ASK)
    first, second, *cut = result.calls
    assert first.error is None
    assert second.error is None
    assert cut
    for call in cut:
        assert call.error is not None
        assert "Loop detected, the call was not made" in call.error
    assert len(world.calls(db)) == 2  # the server saw two calls, never the third


async def test_a_tool_the_server_no_longer_has_is_a_failure_the_model_sees(
    tmp_path: Path,
) -> None:
    db = tmp_path / "server.db"
    tools = await tether.mcp.load_tools(world.stdio_server(db))
    (tmp_path / "server.db.without").write_text("lookup_order")  # a new version, without it
    cls = agents.session_class("Gone", tools)
    async with runtime(tmp_path) as rt:
        session = await rt.spawn(cls, "s1", goal="look after orders")
        result = await session.ask(plan(("lookup_order", {"order_id": "1"})), timeout=ASK)
        held = await rt.quarantine.list()
    assert result.calls
    for call in result.calls:
        assert call.error is not None
        assert "McpToolError" in call.error
        assert "lookup_order" in call.error
    assert held == []
    assert world.calls(db) == []


async def test_results_that_are_not_text_are_recorded_as_json_or_refused_by_name(
    tmp_path: Path,
) -> None:
    db = tmp_path / "server.db"
    tools = await tether.mcp.load_tools(
        world.stdio_server(db), defaults={"retry": tether.RetryPolicy(max_attempts=1)}
    )
    task = plan(("order_label", {"order_id": "5"}), ("order_checksum", {"order_id": "5"}))
    cls = agents.session_class("NotText", tools)
    async with runtime(tmp_path) as rt:
        session = await rt.spawn(cls, "s1", goal="look after orders")
        result = await session.ask(task, timeout=ASK)
        held = await rt.quarantine.list()
    label, *checksum = result.calls
    assert label.result is not None
    blocks = json.loads(label.result)
    assert blocks[0] == {"type": "text", "text": "label of order 5"}
    assert (blocks[1]["type"], blocks[1]["mimeType"]) == ("image", "image/png")
    assert base64.b64decode(blocks[1]["data"]) == b"\x89PNG-label"
    # a number msgpack cannot hold: the call was made, its result cannot be recorded
    assert checksum
    for call in checksum:
        assert call.error is not None
        assert "cannot be recorded" in call.error
    assert held == []  # read-only: a failure, not a held effect


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_the_runtime_stops_the_stdio_servers_it_started_when_it_closes(
    tmp_path: Path,
) -> None:
    db = tmp_path / "server.db"
    tools = await tether.mcp.load_tools(world.stdio_server(db))
    cls = agents.session_class("Closes", tools)
    async with runtime(tmp_path) as rt:
        session = await rt.spawn(cls, "s1", goal="look after orders")
        await session.ask(plan(("lookup_order", {"order_id": "1"})), timeout=ASK)
        [served] = world.calls(db)
        assert alive(served["pid"])
    with anyio.fail_after(world.DEADLINE):
        while any(alive(pid) for pid in world.starts(db)):
            await anyio.sleep(0.05)


@pytest.mark.parametrize("transport", ["http", "http-legacy"])
async def test_an_http_server_that_restarted_is_connected_again_and_the_calls_go_on(
    tmp_path: Path, transport: str
) -> None:
    db = tmp_path / "server.db"
    with world.http_server(db, tmp_path / "http.log", transport) as server:
        tools = await tether.mcp.load_tools(
            tether.mcp.HttpServer(server.url, wait_connected=world.DEADLINE),
            defaults={"retry": tether.RetryPolicy(max_attempts=3), "breaker": None},
        )
        cls = agents.session_class(f"Restarted{transport.replace('-', '')}", tools)
        async with runtime(tmp_path) as rt:
            session = await rt.spawn(cls, "s1", goal="look after orders")
            before = await session.ask(plan(("lookup_order", {"order_id": "1"})), timeout=ASK)
            server.restart()  # a deploy: the server forgets its sessions
            # fail_order has no hints: a call refused by the restarted server is not held
            task = plan(("lookup_order", {"order_id": "2"}), ("fail_order", {"order_id": "3"}))
            after = await session.ask(task, timeout=ASK)
            held = await rt.quarantine.list()
    assert before.calls[0].error is None
    looked_up, *failed = after.calls
    assert looked_up.error is None, looked_up.error
    assert failed
    for call in failed:
        assert call.error is not None
        assert "McpToolError" in call.error
        assert "Error executing tool fail_order" in call.error  # the server ran it
    assert held == []
    served = world.calls(db)
    assert [c["tool"] for c in served] == ["lookup_order", "lookup_order"] + ["fail_order"] * len(
        failed
    )
    assert served[0]["pid"] != served[1]["pid"]


async def test_a_call_that_times_out_while_the_server_starts_was_not_carried_out(
    tmp_path: Path,
) -> None:
    db = tmp_path / "server.db"
    # hold_order has no hints: a call that may have been made would be held for a person
    tools = await tether.mcp.load_tools(
        world.stdio_server(db),
        options={
            "hold_order": {
                "timeout": 2.0,
                "retry": tether.RetryPolicy(max_attempts=1),
                "breaker": None,
            }
        },
    )
    (tmp_path / "server.db.slow").write_text("6")  # from now on, it takes 6 s to start
    cls = agents.session_class("SlowStart", tools)
    task = plan(("hold_order", {"order_id": "1", "seconds": 0}))
    async with runtime(tmp_path) as rt:
        session = await rt.spawn(cls, "s1", goal="look after orders")
        result = await session.ask(task, timeout=ASK)
        held = await rt.quarantine.list()
    assert held == []  # never sent: nothing to hold
    assert result.calls
    world.assert_not_sent(result.calls)
    assert world.calls(db) == []


async def test_an_http_server_down_when_the_runtime_starts_is_used_once_it_is_up(
    tmp_path: Path,
) -> None:
    db = tmp_path / "server.db"
    with world.http_server(db, tmp_path / "http.log") as process:
        server = tether.mcp.HttpServer(process.url, wait_connected=1.0)
        tools = await tether.mcp.load_tools(
            server, defaults={"retry": tether.RetryPolicy(max_attempts=1), "breaker": None}
        )
        process.kill()  # down before the runtime starts
        cls = agents.session_class("DownAtStart", tools)
        async with runtime(tmp_path) as rt:
            session = await rt.spawn(cls, "s1", goal="look after orders")
            down = await session.ask(plan(("fail_order", {"order_id": "1"})), timeout=ASK)
            process.start()
            await until_connected(rt, server)  # restarted with backoff, with no call waiting
            up = await session.ask(plan(("lookup_order", {"order_id": "2"})), timeout=ASK)
            held = await rt.quarantine.list()
    world.assert_not_sent(down.calls)
    assert [c.error for c in up.calls] == [None]
    assert held == []
    assert [c["tool"] for c in world.calls(db)] == ["lookup_order"]


async def test_a_stdio_server_that_could_not_start_is_started_again_with_backoff(
    tmp_path: Path,
) -> None:
    db = tmp_path / "server.db"
    server = world.stdio_server(db, wait_connected=1.0)  # a call's wait for a server down
    tools = await tether.mcp.load_tools(
        server, defaults={"retry": tether.RetryPolicy(max_attempts=1), "breaker": None}
    )
    down = tmp_path / "server.db.down"
    down.touch()  # from now on the server exits as it starts
    cls = agents.session_class("StartsLater", tools)
    async with runtime(tmp_path) as rt:
        session = await rt.spawn(cls, "s1", goal="look after orders")
        failed = await session.ask(plan(("lookup_order", {"order_id": "1"})), timeout=ASK)
        with anyio.fail_after(world.DEADLINE):  # its start failed, and it is started again
            while len(world.starts(db)) < 4:  # the listing's start, then the runtime's
                await anyio.sleep(0.02)
        down.unlink()
        await until_connected(rt, server)  # the next restart connects
        result = await session.ask(plan(("lookup_order", {"order_id": "2"})), timeout=ASK)
        node = await tree_node(rt, tether.mcp.connection_id(server.name))
    world.assert_not_sent(failed.calls)
    assert result.calls[-1].error is None
    [served] = world.calls(db)
    assert served["order_id"] == "2"
    assert node.restart_count >= 2


@pytest.mark.parametrize("transport", ["http", "http-legacy"])
async def test_a_call_in_flight_when_an_http_server_dies_is_held_whatever_the_next_call_meets(
    tmp_path: Path, transport: str
) -> None:
    db = tmp_path / "server.db"
    with world.http_server(db, tmp_path / "http.log", transport) as server:
        # hold_order has no hints: maybe carried out, it must be held for a person
        tools = await tether.mcp.load_tools(
            tether.mcp.HttpServer(server.url, wait_connected=1.0),
            defaults={"retry": tether.RetryPolicy(max_attempts=1), "breaker": None},
        )
        cls = agents.session_class(f"DiesInFlight{transport.replace('-', '')}", tools)
        async with runtime(tmp_path) as rt:
            busy = await rt.spawn(cls, "s1", goal="look after orders")
            other = await rt.spawn(cls, "s2", goal="look after orders")
            await busy.tell(plan(("hold_order", {"order_id": "1", "seconds": 3600})))
            with anyio.fail_after(world.DEADLINE):  # the server is doing the work
                while not world.calls(db, "hold_order"):
                    await anyio.sleep(0.02)
            server.kill()
            # another call, at once, meets the server gone (a failed connect)
            refused = await other.ask(plan(("lookup_order", {"order_id": "2"})), timeout=ASK)
            with anyio.fail_after(world.DEADLINE):
                while not (held := await rt.quarantine.list("s1")):
                    await anyio.sleep(0.02)
    [effect] = held
    [hold] = world.calls(db, "hold_order")
    assert (effect.tool, effect.key) == ("hold_order", hold["meta_key"])
    # the other call met the server gone (not sent; or, if handed to a transport that failed
    # at that moment, maybe sent): a failure either way, never a success
    assert refused.calls
    assert all(call.error is not None for call in refused.calls)


def test_listing_a_server_that_cannot_start_says_so(tmp_path: Path) -> None:
    db = tmp_path / "server.db"
    (tmp_path / "server.db.down").touch()
    with pytest.raises(
        tether.mcp.McpNotConnected, match=r"cannot connect \(stdio: .*tests\.mcp\.server"
    ):
        tether.mcp.tools(world.stdio_server(db))
    with pytest.raises(
        tether.mcp.McpNotConnected, match=r"cannot connect \(streamable HTTP: .*\): ConnectError"
    ):
        tether.mcp.tools(tether.mcp.HttpServer(f"http://127.0.0.1:{world.free_port()}/mcp"))


async def test_a_tool_called_directly_raises_the_servers_error(tmp_path: Path) -> None:
    db = tmp_path / "server.db"
    tools = await tether.mcp.load_tools(world.stdio_server(db), only=["fail_order"])
    with pytest.raises(tether.mcp.McpToolError, match="Error executing tool fail_order"):
        await tools[0](order_id="1")
    [served] = world.calls(db)
    assert served["tool"] == "fail_order"


async def test_a_connection_whose_supervisor_gave_up_starts_again_on_its_next_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an MCP supervisor that gives up at once: past 2 restarts, with hardly any backoff
    quick = OneForOne(max_restarts=2, within=60.0, backoff=Backoff(0.01, 0.02))
    monkeypatch.setattr(McpSupervisor, "strategy", quick)
    db = tmp_path / "server.db"
    server = world.stdio_server(db, wait_connected=1.0)
    tools = await tether.mcp.load_tools(
        server, defaults={"retry": tether.RetryPolicy(max_attempts=1), "breaker": None}
    )
    down = tmp_path / "server.db.down"
    down.touch()
    cls = agents.session_class("GaveUp", tools)
    async with runtime(tmp_path) as rt:
        session = await rt.spawn(cls, "s1", goal="look after orders")
        failed = await session.ask(plan(("lookup_order", {"order_id": "1"})), timeout=ASK)
        with anyio.fail_after(world.DEADLINE):  # it gave up, and tether.guards restarted it
            while not (supervisor := await tree_node(rt, MCP_SUPERVISOR)).restart_count:
                await anyio.sleep(0.05)
        down.unlink()
        # the next call starts it again (it may not connect within that call's wait)
        other = await rt.spawn(cls, "s2", goal="look after orders")
        await other.ask(plan(("lookup_order", {"order_id": "2"})), timeout=ASK)
        await until_connected(rt, server)
        third = await rt.spawn(cls, "s3", goal="look after orders")
        result = await third.ask(plan(("lookup_order", {"order_id": "3"})), timeout=ASK)
    world.assert_not_sent(failed.calls)
    assert supervisor.restart_count >= 1
    assert [c.error for c in result.calls] == [None]
    assert "3" in [c["order_id"] for c in world.calls(db)]


async def test_a_tool_named_like_the_sessions_model_is_refused(tmp_path: Path) -> None:
    tools = await tether.mcp.load_tools(
        world.stdio_server(tmp_path / "server.db"),
        only=["lookup_order"],
        options={"lookup_order": {"name": "model"}},
    )

    async def define_and_spawn() -> None:  # refused at either point
        cls = agents.session_class("NamedModel", tools)
        async with runtime(tmp_path) as rt:
            await rt.spawn(cls, "s1", goal="look after orders")

    with pytest.raises(tether.ConfigError, match="model"):
        await define_and_spawn()
