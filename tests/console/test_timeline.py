"""A session's timeline, drawn from its journal, ledger, approvals, restarts and dead letters:
every event placed at a time the store recorded, in the journal's order, and every text
escaped in the SVG."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from starlette.testclient import TestClient

from tests.console.conftest import LOOPBACK
from tether.console import ConsoleConfig, create_app, timeline
from tether.store.records import ApprovalDecision, ApprovalRecord, DeadLetter, EffectRecord


def effect(
    idx: int, tool: str, at: float, done: float, status: str = "done", **kw: object
) -> EffectRecord:
    return EffectRecord(
        actor_id="s",
        msg_id="m1",
        idx=idx,
        key=f"k{idx}",
        tool=tool,
        input_hash="h",
        args=b"\x80",
        status=status,
        attempts=int(kw.get("attempts", 1)),  # type: ignore[call-overload]
        created_at=at,
        updated_at=done,
        history=list(kw.get("history", [])),  # type: ignore[call-overload]
    )


JOURNAL = [
    (1, {"type": "TaskStarted", "task": 1, "text": "refund order <42>", "reply_to": "x"}),
    (2, {"type": "StepBegun", "task": 1, "step": 1, "belief": "", "frontier": "decide"}),
    (3, {"type": "ModelDecided", "decision": {"type": "ToolCall", "tool": "refund", "args": {}}}),
    (4, {"type": "ToolResult", "record": {"tool": "refund", "result": "ok"}, "key": "k1"}),
    (5, {"type": "StepBegun", "task": 1, "step": 2, "belief": "", "frontier": "answer"}),
    (6, {"type": "ModelDecided", "decision": {"type": "FinalAnswer", "text": "Done."}}),
    (7, {"type": "TaskEnded", "task": 1, "outcome": "finished", "answer": "Done."}),
]


def test_journal_events_take_the_times_of_the_ledger_rows_they_record() -> None:
    ledger = [
        effect(0, "model", 100.0, 101.0),
        effect(1, "refund", 102.0, 150.0, attempts=2, history=["attempt 1 did not report back"]),
        effect(2, "model", 151.0, 152.0),
    ]
    request = ApprovalRecord(
        request_id="apr-1",
        actor_id="s",
        msg_id="m1",
        idx=1,
        tool="refund",
        tool_path="",
        args=b"\x80",
        fingerprint="f",
        reason="tool refund requires approval",
        context=b"\x80",
        deadline=9999.0,
        on_timeout="reject",
        quorum=1,
        status="approved",
        decisions=[ApprovalDecision(kind="approve", by="alice", at=140.0)],
        created_at=102.5,
        decided_at=140.0,
    )
    dead = DeadLetter("m9", "s", "Ping", b"", 3, ["boom"], "failed 3 times", 160.0)
    tl = timeline.build(JOURNAL, ledger, [request], [(155.0, "crashed: boom")], [dead], now=200.0)

    events = [(at, kind, text) for at, kind, text in tl.events]
    assert events[0] == (
        101.0,
        "task",
        "task 1 started: refund order <42>",
    )  # the next timed event's
    assert (101.0, "model", "model: call refund({})") in events  # its model call's receipt
    assert (150.0, "tool", "refund({}) → ok [effect k1]") in events  # its effect's receipt, by key
    assert (152.0, "model", "model: final answer: Done.") in events
    assert (140.0, "approval", "refund approved by alice") in events
    assert (155.0, "restart", "restarted: crashed: boom") in events
    assert (160.0, "dead letter", "Ping dead-lettered: failed 3 times") in events
    assert [at for at, _, _ in events] == sorted(at for at, _, _ in events)

    lanes = {i.lane: i for i in tl.items if i.lane in ("Tasks", "Approvals")}
    assert (lanes["Tasks"].start, lanes["Tasks"].end, lanes["Tasks"].status) == (
        101.0,
        152.0,
        "finished",
    )
    assert (lanes["Approvals"].start, lanes["Approvals"].end) == (102.5, 140.0)
    [tool] = [i for i in tl.items if i.lane == "Tools"]
    assert tool.label == "refund x2"
    assert "did not report back" in tool.detail

    drawn = timeline.svg(tl)
    assert drawn.startswith("<svg")
    assert "refund order &lt;42&gt;" in drawn  # escaped
    assert "<42>" not in drawn


def test_a_task_under_way_reaches_now(tmp_path: Path) -> None:
    tl = timeline.build(JOURNAL[:3], [effect(0, "model", 10.0, 11.0)], [], [], [], now=20.0)
    [task] = [i for i in tl.items if i.lane == "Tasks"]
    assert (task.end, task.status) == (20.0, "running")


def test_the_tree_shows_an_open_breaker_with_its_time_left(tmp_path: Path) -> None:
    """The demo's fraud check trips its breaker: the tree says it is open, why, and for how
    long; the demo's resumed refund shows its two attempts on the session's timeline."""
    db = tmp_path / "demo.db"
    demo = [sys.executable, "-m", "tether", "demo", "--db", str(db)]
    done = subprocess.run(
        demo, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    app = create_app(ConsoleConfig(db=str(db), auth="none"))
    with TestClient(app, base_url=LOOPBACK, client=("127.0.0.1", 5000)) as c:
        tree = c.get("/tree").text
        assert "breaker:check_fraud_score" in tree
        assert "breaker open" in tree
        assert " left; trips=1" in tree
        dave = c.get("/sessions/dave").text
        assert "refund x2" in dave


def _marks(drawn: str) -> list[float]:
    """The x of every point mark (a restart, a dead letter) in a drawn timeline."""
    return [float(x) for x in re.findall(r'<path d="M([0-9.]+) ', drawn)]


def test_marks_at_the_ends_of_the_time_axis_are_drawn_whole() -> None:
    """A session whose only record is one dead letter: its mark sits at the start of the
    axis, and is drawn whole inside the plot, not cut by its edge."""
    dead = DeadLetter("m9", "s", "Ping", b"", 3, ["boom"], "failed 3 times", 160.0)
    restarts = [(160.0, "crashed: boom"), (170.0, "crashed again")]
    drawn = timeline.svg(timeline.build([], [], [], restarts, [dead], now=170.0))
    marks = _marks(drawn)
    assert len(marks) == 3
    half = timeline.MARK_HALF_WIDTH
    plot = (timeline.LEFT, timeline.WIDTH - timeline.RIGHT)
    assert all(plot[0] <= x - half and x + half <= plot[1] for x in marks), (marks, plot)


def test_a_short_item_is_drawn_over_a_long_one_in_its_lane() -> None:
    """A quick call made while a quarantined one waits is drawn after (over) the long bar,
    so both show."""
    ledger = [
        effect(0, "refund", 100.0, 100.5),
        effect(1, "send_email", 100.1, 100.2, status="quarantined"),  # still unknown at 400
    ]
    drawn = timeline.svg(timeline.build([], ledger, [], [], [], now=400.0))
    long_bar = drawn.index("send_email — ")
    short_bar = drawn.index("refund — ")
    assert long_bar < short_bar
