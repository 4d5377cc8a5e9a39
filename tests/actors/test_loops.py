"""The loop detector's pure core: each pattern, the feedback ladder, and no false positives."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.actors.guards.loops import (
    Detection,
    LoopCallObserved,
    LoopDetector,
    LoopEvent,
    LoopFlagged,
    LoopPolicy,
    LoopReset,
    LoopResultObserved,
    LoopState,
    canonical_hash,
)
from tether.errors import ConfigError

T0 = 1_700_000_000.0


class Agent:
    """Drives a detector like a wrapper would, keeping the journal."""

    def __init__(self, policy: LoopPolicy | None = None) -> None:
        self.detector = LoopDetector(policy)
        self.journal: list[LoopEvent] = []
        self.detections: list[Detection] = []
        self.now = T0

    def call(self, tool: str, result: object = None, **args: object) -> Detection | None:
        """Observe the call, then (when ``result`` is given) its result; return the first detection."""
        self.now += 1
        args_hash = canonical_hash(args)
        found, events = self.detector.observe_call(tool, args_hash, now=self.now)
        self.journal.extend(events)
        if found is not None:
            self.detections.append(found)
        if result is not None:
            after, events = self.detector.observe_result(
                tool, args_hash, canonical_hash(result), now=self.now
            )
            self.journal.extend(events)
            if after is not None:
                self.detections.append(after)
            found = found or after
        return found


def quiet(policy: LoopPolicy | None = None, **changes: Any) -> LoopPolicy:
    """A policy with every pattern off except those given."""
    off: dict[str, Any] = {
        "repeat": None,
        "cycle_period": None,
        "window": None,
        "no_progress": None,
    }
    off.update(changes)
    return msgspec.structs.replace(policy or LoopPolicy(), **off)


# -- each pattern ------------------------------------------------------------------------------


def test_repeat_detected_on_the_third_identical_call() -> None:
    """Same tool, same arguments, three times in a row: feedback saying so."""
    agent = Agent()
    assert agent.call("search", query="weather") is None
    assert agent.call("search", query="weather") is None
    found = agent.call("search", query="weather")
    assert found == Detection(
        pattern="repeat",
        response="feedback",
        detail="search was called 3 times in a row with the same arguments.",
        tool="search",
        count=3,
    )


def test_repeat_ignores_argument_order_but_not_argument_values() -> None:
    """Arguments are compared canonically: key order does not matter, values do."""
    agent = Agent()
    agent.call("read_file", path="a.py", lines=10)
    agent.call("read_file", lines=10, path="a.py")
    assert agent.call("read_file", path="b.py", lines=10) is None
    assert agent.detections == []
    agent.call("read_file", path="b.py", lines=10)
    assert agent.call("read_file", lines=10, path="b.py") is not None


def test_cycle_of_period_two_detected_after_two_full_cycles() -> None:
    """A-B-A-B with identical arguments is a cycle at the fourth call."""
    agent = Agent(quiet(cycle_period=4))
    assert agent.call("open_page", url="x") is None
    assert agent.call("go_back") is None
    assert agent.call("open_page", url="x") is None
    found = agent.call("go_back")
    assert found is not None
    assert found.pattern == "cycle"
    assert found.count == 2
    assert (
        found.detail == "The sequence open_page → go_back repeated 2 times with the same arguments."
    )
    found = agent.call("open_page", url="x")
    assert found is not None  # the loop goes on: still a cycle (B-A-B-A)
    assert found.pattern == "cycle"


def test_cycle_of_period_three_counts_full_cycles() -> None:
    """A-B-C-A-B-C is detected; a third round reports three cycles."""
    agent = Agent(quiet(cycle_period=4))
    for _ in range(2):
        agent.call("plan")
        agent.call("search", q="x")
        agent.call("summarize")
    assert [d.pattern for d in agent.detections] == ["cycle"]
    agent.call("plan")
    agent.call("search", q="x")
    found = agent.call("summarize")
    assert found is not None
    assert found.count == 3
    assert "plan → search → summarize repeated 3 times" in found.detail


def test_alternation_with_changing_arguments_is_not_a_cycle() -> None:
    """Edit then test, edit then test: each edit differs, so nothing repeats."""
    agent = Agent()
    for i in range(10):
        agent.call("edit_file", path="a.py", diff=f"change {i}")
        agent.call("run_tests", result=f"{10 - i} failures")
    assert agent.detections == []


def test_cycle_longer_than_the_period_limit_is_not_reported() -> None:
    agent = Agent(quiet(cycle_period=2))
    for _ in range(3):
        for tool in ("a", "b", "c"):
            agent.call(tool)
    assert agent.detections == []


def test_window_detects_interleaved_repeats() -> None:
    """The same call four times within 20 calls, other calls in between."""
    agent = Agent()
    for i, other in enumerate(["list_dir", "grep", "read_file"]):
        assert agent.call("fetch", url="https://example.com") is None
        agent.call(other, arg=i)
    found = agent.call("fetch", url="https://example.com")
    assert found is not None
    assert found.pattern == "window"
    assert found.count == 4
    assert found.detail == (
        "fetch was called 4 times with the same arguments in the last 7 calls, "
        "returning no results yet."
    )


def test_window_forgives_repeats_that_return_new_results() -> None:
    """Re-running the same test command while the failures change is progress."""
    agent = Agent()
    for i in range(12):
        agent.call("edit_file", path="a.py", diff=f"change {i}")
        agent.call("run_tests", result=f"{12 - i} failures")
    assert agent.detections == []


def test_window_counts_repeats_that_return_old_results() -> None:
    """Alternating between two results is not progress: four calls, two results, still three."""
    agent = Agent(quiet(window=3, window_size=10))
    for i in range(4):
        agent.call("status", result=f"phase {i % 2}")
        agent.call("edit_file", diff=str(i))
    assert len(agent.detections) == 1
    assert agent.detections[0].detail.endswith("returning only 2 different results.")


def test_no_progress_detected_on_the_third_identical_result() -> None:
    """The same call returning the same result a third time, even with other calls between."""
    agent = Agent(quiet(no_progress=3))
    agent.call("read_file", result="same text", path="notes.md")
    agent.call("grep", result="nothing", pattern="x")
    agent.call("read_file", result="same text", path="notes.md")
    assert agent.detections == []
    agent.call("grep", result="nothing", pattern="y")
    found = agent.call("read_file", result="same text", path="notes.md")
    assert found == Detection(
        pattern="no_progress",
        response="feedback",
        detail="read_file returned the same result 3 times in a row for the same arguments.",
        tool="read_file",
        count=3,
    )


def test_no_progress_not_detected_when_the_result_changes() -> None:
    agent = Agent(quiet(no_progress=2))
    for i in range(5):
        agent.call("job_status", result=f"{i * 20}% done", job="42")
    assert agent.detections == []


def test_results_fill_calls_in_order_even_when_parallel() -> None:
    """Two identical calls in flight: results fill the oldest waiting call first."""
    detector = LoopDetector(quiet(no_progress=2))
    detector.observe_call("ping", "h", now=T0)
    detector.observe_call("ping", "h", now=T0)
    found, _ = detector.observe_result("ping", "h", "pong", now=T0)
    assert found is None
    assert [c.result_hash for c in detector.state.history] == ["pong", None]
    found, _ = detector.observe_result("ping", "h", "pong", now=T0)
    assert found is not None
    assert found.pattern == "no_progress"


def test_result_without_a_waiting_call_is_journaled_and_ignored() -> None:
    detector = LoopDetector()
    found, events = detector.observe_result("ghost", "h", "r", now=T0)
    assert found is None
    assert events == [LoopResultObserved(at=T0, tool="ghost", args_hash="h", result_hash="r")]
    assert detector.state == LoopState()


def test_exempt_tools_are_not_flagged() -> None:
    """Polling tools may repeat; they are still recorded."""
    agent = Agent(LoopPolicy(exempt_tools=frozenset({"wait"})))
    for _ in range(10):
        agent.call("wait", result="still running", seconds=5)
    assert agent.detections == []
    assert len(agent.detector.state.history) == 10


def test_disabled_patterns_never_fire() -> None:
    agent = Agent(quiet())
    for _ in range(30):
        agent.call("same", result="same")
    assert agent.detections == []


# -- responses -------------------------------------------------------------------------------


def test_ignored_feedback_escalates() -> None:
    """After three feedbacks the model ignored, the fourth detection escalates."""
    agent = Agent()
    for _ in range(6):
        agent.call("search", query="weather")
    assert [d.response for d in agent.detections] == ["feedback"] * 3 + ["escalate"]
    assert agent.detections[-1].detail.endswith("The loop went on after 3 warnings.")


def test_old_feedback_falls_out_of_the_ladder() -> None:
    """Feedbacks older than `history` calls no longer count towards escalation."""
    agent = Agent(LoopPolicy(history=20, max_feedback=2))
    rng = random.Random(3)
    for _ in range(3):
        for _ in range(3):
            agent.call("search", query="weather")
        for _ in range(25):
            agent.call("read_file", path=str(rng.random()))
    assert [d.response for d in agent.detections] == ["feedback"] * 3


def test_reset_response_clears_the_history() -> None:
    """A reset response journals the detection and a reset in the same step."""
    agent = Agent(LoopPolicy(on_repeat="reset"))
    agent.call("search", q="x")
    agent.call("search", q="x")
    agent.call("search", q="x")
    assert agent.detections[-1].response == "reset"
    assert [type(e) for e in agent.journal[-3:]] == [LoopCallObserved, LoopFlagged, LoopReset]
    assert agent.detector.state == LoopState(reset_at=agent.journal[-1].at)
    assert agent.call("search", q="x") is None


@pytest.mark.parametrize("response", ["stop", "escalate"])
def test_configured_response_is_returned(response: str) -> None:
    agent = Agent(LoopPolicy(on_cycle=response))  # type: ignore[arg-type]
    for _ in range(2):
        agent.call("a")
        agent.call("b")
    assert [d.response for d in agent.detections] == [response]


def test_reset_clears_history_and_ladder() -> None:
    detector = LoopDetector()
    for _ in range(5):
        detector.observe_call("x", "h", now=T0)
    assert detector.state.feedbacks
    assert detector.reset(now=T0, reason="human said go on") == [
        LoopReset(at=T0, reason="human said go on")
    ]
    assert detector.state == LoopState(reset_at=T0)


# -- no false positives ------------------------------------------------------------------------


def healthy_session(seed: int, length: int = 200) -> list[tuple[str, dict[str, object], str]]:
    """A coding agent exploring, fixing and searching: re-reads, re-runs, many tools."""
    rng = random.Random(seed)
    files = [f"src/pkg/mod{i}.py" for i in range(25)] + [f"tests/test_mod{i}.py" for i in range(10)]
    dirs = ["src", "src/pkg", "tests", "docs", "scripts", "."]
    version: dict[str, int] = defaultdict(int)
    calls: list[tuple[str, dict[str, object], str]] = []
    recent_reads: list[tuple[str, int]] = []
    edits = 0

    def read(path: str) -> None:
        calls.append(("read_file", {"path": path}, f"{path}@{version[path]}"))
        recent_reads.append((path, version[path]))

    def fresh(path: str) -> bool:  # not read unchanged within the last dozen calls
        return (path, version[path]) not in recent_reads[-12:]

    while len(calls) < length:
        task = rng.choice(["explore", "fix", "fix", "search"])
        if task == "explore":
            listed = {c[1]["path"] for c in calls[-20:] if c[0] == "list_dir"}
            choices = [d for d in dirs if d not in listed] or dirs
            path = rng.choice(choices)
            calls.append(("list_dir", {"path": path}, f"listing of {path}"))
            for f in rng.sample([f for f in files if fresh(f)], k=rng.randint(1, 4)):
                read(f)
            pattern = f"def {rng.choice(['run', 'load', 'save', 'parse'])}_{rng.randint(0, 99)}"
            calls.append(("grep", {"pattern": pattern, "path": "src"}, f"hits for {pattern}"))
        elif task == "fix":
            target = rng.choice(files[:25])
            if fresh(target):
                read(target)
            for _ in range(rng.randint(1, 4)):
                edits += 1
                calls.append(("edit_file", {"path": target, "diff": f"edit {edits}"}, "ok"))
                version[target] += 1
                calls.append(("run_tests", {"path": "tests"}, f"run after edit {edits}"))
                if rng.random() < 0.4:
                    read(target)  # re-read the file just changed
        else:
            query = f"{rng.choice(['python', 'msgspec', 'anyio', 'sqlite'])} {rng.randint(0, 999)}"
            calls.append(("web_search", {"query": query}, f"results for {query}"))
            for n in range(rng.randint(0, 2)):
                url = f"https://docs.example/{query.replace(' ', '/')}/{n}"
                calls.append(("fetch_url", {"url": url}, f"page {url}"))
    return calls[:length]


@pytest.mark.parametrize("seed", range(10))
def test_no_false_positive_on_a_varied_healthy_trajectory(seed: int) -> None:
    """200 calls of exploring, test-fix loops and searches: nothing is flagged."""
    agent = Agent()
    session = healthy_session(seed)
    assert len({tool for tool, _, _ in session}) >= 6
    assert sum(tool == "run_tests" for tool, _, _ in session) >= 20  # same args, many times
    for tool, args, result in session:
        agent.call(tool, result=result, **args)
    assert agent.detections == []


# -- policy ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"repeat": 1}, "repeat"),
        ({"repeat": True}, "repeat"),
        ({"cycle_period": 1}, "cycle_period"),
        ({"cycle_repeats": 1}, "cycle_repeats"),
        ({"window": 1}, "window"),
        ({"window": 30, "window_size": 20}, "window"),
        ({"window_size": 1}, "window_size"),
        ({"no_progress": 1}, "no_progress"),
        ({"no_progress": 21}, "no_progress"),
        ({"on_cycle": "panic"}, "on_cycle"),
        ({"after_feedback": "ignore"}, "after_feedback"),
        ({"max_feedback": 0}, "max_feedback"),
        ({"exempt_tools": {"wait"}}, "exempt_tools"),
        ({"history": 10}, "history"),
        ({"cycle_period": 30, "history": 50}, "history"),
    ],
)
def test_policy_validation_names_the_bad_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=rf"LoopPolicy\.{field} must be"):
        LoopPolicy(**kwargs)


def test_canonical_hash_is_stable_and_order_free() -> None:
    assert canonical_hash({"a": 1, "b": [1, 2]}) == canonical_hash({"b": [1, 2], "a": 1})
    assert canonical_hash({"a": 1}) != canonical_hash({"a": 2})
    assert len(canonical_hash(object())) == 16  # unencodable values fall back to repr


# -- property: the journal is the state --------------------------------------------------------

LOOP_OPS = st.lists(
    st.tuples(
        st.sampled_from(["call", "call", "result", "reset"]),
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from(["h1", "h2"]),
        st.sampled_from(["r1", "r2"]),
    ),
    max_size=120,
)
LOOP_POLICIES = [
    LoopPolicy(),
    LoopPolicy(history=8, window=3, window_size=6, no_progress=2, max_feedback=1),
    LoopPolicy(on_repeat="reset", on_window="stop", exempt_tools=frozenset({"c"})),
]


@settings(max_examples=300, deadline=None)
@given(policy_index=st.integers(0, len(LOOP_POLICIES) - 1), ops=LOOP_OPS)
def test_fold_of_emitted_events_equals_live_state(
    policy_index: int, ops: list[tuple[str, str, str, str]]
) -> None:
    """Folding the journal (also through msgpack) rebuilds the live state; history stays bounded."""
    policy = LOOP_POLICIES[policy_index]
    live = LoopDetector(policy)
    journal: list[LoopEvent] = []
    for i, (kind, tool, args_hash, result_hash) in enumerate(ops):
        now = T0 + i
        if kind == "call":
            _, events = live.observe_call(tool, args_hash, now=now)
        elif kind == "result":
            _, events = live.observe_result(tool, args_hash, result_hash, now=now)
        else:
            events = live.reset(now=now, reason="test")
        journal.extend(events)
        assert len(live.state.history) <= policy.history
        assert LoopDetector.fold(policy, journal).state == live.state
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(journal), type=list[LoopEvent])
    assert LoopDetector.fold(policy, decoded).state == live.state
