"""LangGraph with its SQLite checkpointer: the 3-effect step as a user would write it there.

A ``StateGraph`` of three nodes, one per tool (x+1, x*2, x-3, the tools of
``bench_effects.Session``), compiled with ``AsyncSqliteSaver`` (``langgraph-checkpoint-sqlite``:
aiosqlite, WAL) on a fresh file per run. One thread per session (``thread_id``), 100 sessions
at once under ``asyncio.gather``; one step = one ``ainvoke`` of the graph on the session's
thread, whose state (``total``, ``steps``) comes from the thread's checkpoint. Two durability
modes (LangGraph >= 0.6, ``ainvoke(..., durability=...)``): ``"sync"`` writes each checkpoint
before the next node starts; ``"async"``, LangGraph's default, writes it while the next node
runs. Checked on every run: each ``ainvoke``'s result, and afterwards the state of every thread
read back from the checkpointer (``aget_state``).

It runs in a child process (``children.PipeChild``), so that LangGraph's imports (pydantic,
langchain-core: hundreds of thousands of objects) are not in the heap of the process that times
tether, where CPython's cyclic collector would walk them during tether's runs::

    python benchmarks/peer_langgraph.py --child   # serves rounds on stdin (see children.py)
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parent))

from children import PipeChild, serve
from run import Sample, rm_scratch, scratch_dir

DURABILITIES = ("sync", "async")


def figure_key(durability: str) -> str:
    return f"1.langgraph_{durability}"


def workflow(x: int) -> int:
    """What one step computes (as ``bench_effects.workflow``), to check every run against."""
    return (x + 1) * 2 - 3


class StepState(TypedDict, total=False):
    x: int
    total: int
    steps: int


async def s1(state: StepState) -> StepState:
    return {"x": state["x"] + 1}


async def s2(state: StepState) -> StepState:
    return {"x": state["x"] * 2}


async def s3(state: StepState) -> StepState:
    x = state["x"] - 3
    return {"x": x, "total": state["total"] + x, "steps": state["steps"] + 1}


def build_graph() -> Any:
    from langgraph.graph import END, START, StateGraph

    g = StateGraph(StepState)
    g.add_node("s1", s1)
    g.add_node("s2", s2)
    g.add_node("s3", s3)
    g.add_edge(START, "s1")
    g.add_edge("s1", "s2")
    g.add_edge("s2", "s3")
    g.add_edge("s3", END)
    return g


async def langgraph_sessions(n_sessions: int, steps: int, durability: str) -> Sample:
    """``steps`` graph runs over ``n_sessions`` threads at once; every thread's state checked."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    per = steps // n_sessions
    expected = {"total": sum(workflow(x) for x in range(per)), "steps": per}
    d = scratch_dir(f"langgraph-{durability}")
    try:
        async with AsyncSqliteSaver.from_conn_string(str(d / "langgraph.db")) as saver:
            app = build_graph().compile(checkpointer=saver)

            def config(i: int) -> Any:
                return {"configurable": {"thread_id": f"session-{i:04d}"}}

            async def session(i: int) -> None:
                for x in range(per):
                    # The first step starts the thread's state; later ones read it back from
                    # the thread's checkpoint.
                    given: StepState = {"x": x, "total": 0, "steps": 0} if x == 0 else {"x": x}
                    out = await app.ainvoke(given, config(i), durability=durability)
                    if out["x"] != workflow(x) or out["steps"] != x + 1:
                        raise AssertionError(f"thread {i} step {x}: {out}")

            t0 = time.perf_counter()
            await asyncio.gather(*(session(i) for i in range(n_sessions)))
            dt = time.perf_counter() - t0
            for i in range(n_sessions):
                got = (await app.aget_state(config(i))).values
                if {k: got.get(k) for k in expected} != expected:
                    raise AssertionError(f"thread {i}: stored {got}, expected {expected}")
    finally:
        rm_scratch(d)
    return {figure_key(durability): (per * n_sessions, dt)}


def sqlite_setup() -> str:
    """journal_mode and synchronous of the checkpointer's connection, as it opens them."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async def probe() -> str:
        d = scratch_dir("langgraph-probe")
        try:
            async with AsyncSqliteSaver.from_conn_string(str(d / "probe.db")) as saver:
                await saver.setup()
                modes = []
                for pragma in ("journal_mode", "synchronous"):
                    async with saver.conn.execute(f"PRAGMA {pragma}") as cur:
                        row = await cur.fetchone()
                    modes.append(f"{pragma}={row[0] if row else '?'}")
                return ", ".join(modes)
        finally:
            rm_scratch(d)

    return asyncio.run(probe())


def child() -> None:
    def ready() -> dict[str, Any]:
        from importlib.metadata import version

        return {
            "sqlite": sqlite_setup(),
            "langgraph": version("langgraph"),
            "checkpoint_sqlite": version("langgraph-checkpoint-sqlite"),
            "sqlite_version": sqlite3.sqlite_version,
        }

    def handle(cmd: dict[str, Any]) -> dict[str, Any]:
        sample = asyncio.run(langgraph_sessions(cmd["sessions"], cmd["steps"], cmd["durability"]))
        return {"sample": sample}

    serve(ready, handle)


class LangGraphChild(PipeChild):
    """The child serving both durability modes, one command per scenario and round."""

    def __init__(self) -> None:
        super().__init__("LangGraph child", [__file__, "--child"])
        self.setup = str(self.ready["sqlite"])
        self.versions = (
            f"langgraph {self.ready['langgraph']}, "
            f"langgraph-checkpoint-sqlite {self.ready['checkpoint_sqlite']}"
        )

    def run(self, sessions: int, steps: int, durability: str) -> Sample:
        return self.sample({"sessions": sessions, "steps": steps, "durability": durability})


def figures() -> list[tuple[str, str, str]]:
    return [
        (
            figure_key(d),
            f"LangGraph 3-node graph, AsyncSqliteSaver, durability={d!r}"
            + (" (LangGraph's default)" if d == "async" else ""),
            "steps/s",
        )
        for d in DURABILITIES
    ]


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        child()
    else:
        sys.exit(__doc__)
