"""Context bundle assembly: pinned lanes, the fixed trim order, determinism and the budget."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.actors.context import (
    FRAGMENT_OVERHEAD,
    ChatMessage,
    Checkpoint,
    Constraint,
    ContextBundle,
    Fragment,
    Goal,
    Summary,
    ToolCallRecord,
    Trimmed,
    assemble,
    default_counter,
    fragment_text,
    modified_note,
)
from tether.errors import ConfigError


def one_per_fragment(text: str) -> int:
    """Every fragment costs one token, so the budgets below count fragments."""
    return 1


def msg(i: int, role: str = "user") -> ChatMessage:
    return ChatMessage(role, f"m{i}")


def tool(i: int) -> ToolCallRecord:
    return ToolCallRecord("search", {"q": i}, result=f"r{i}")


PINNED: list[Fragment] = [
    Goal("refund order 7"),
    Constraint("never refund twice"),
    Checkpoint("c1"),
]


def test_everything_fits() -> None:
    frags: list[Fragment] = [*PINNED, Summary("s"), msg(1), tool(1), msg(2, "assistant")]
    bundle = assemble(frags, budget=100, count_tokens=one_per_fragment)
    assert bundle.goal == Goal("refund order 7")
    assert bundle.constraints == (Constraint("never refund twice"),)
    assert bundle.checkpoint == Checkpoint("c1")
    assert bundle.summary == Summary("s")
    assert bundle.history == (msg(1), tool(1), msg(2, "assistant"))
    assert bundle.messages == (msg(1), msg(2, "assistant"))
    assert bundle.tool_results == (tool(1),)
    assert bundle.tokens_used == 7
    assert bundle.budget == 100
    assert bundle.trimmed == Trimmed()


def test_pinned_lanes_and_the_summary_are_never_trimmed() -> None:
    frags: list[Fragment] = [*PINNED, Constraint("ask first"), Summary("s"), msg(1), tool(1)]
    bundle = assemble(frags, budget=5, count_tokens=one_per_fragment)
    assert bundle.goal == Goal("refund order 7")
    assert bundle.constraints == (Constraint("never refund twice"), Constraint("ask first"))
    assert bundle.checkpoint == Checkpoint("c1")
    assert bundle.summary == Summary("s")
    assert bundle.history == ()
    assert bundle.tokens_used == 5
    assert bundle.trimmed == Trimmed(messages=1, tool_results=1)
    assert bundle.trimmed.total == 2


def test_trim_order_messages_then_tools_and_never_the_summary() -> None:
    m1, m2, m3, t1, t2, t3 = msg(1), msg(2), msg(3), tool(1), tool(2), tool(3)
    frags: list[Fragment] = [*PINNED, Summary("s"), m1, t1, m2, t2, m3, t3]
    seen = {}
    for budget in range(10, 3, -1):
        b = assemble(frags, budget=budget, count_tokens=one_per_fragment)
        seen[budget] = (b.history, b.summary is not None, b.trimmed, b.tokens_used)
    assert seen == {
        10: ((m1, t1, m2, t2, m3, t3), True, Trimmed(), 10),
        9: ((t1, m2, t2, m3, t3), True, Trimmed(messages=1), 9),
        8: ((t1, t2, m3, t3), True, Trimmed(messages=2), 8),
        7: ((t1, t2, t3), True, Trimmed(messages=3), 7),
        6: ((t2, t3), True, Trimmed(messages=3, tool_results=1), 6),
        5: ((t3,), True, Trimmed(messages=3, tool_results=2), 5),
        4: ((), True, Trimmed(messages=3, tool_results=3), 4),
    }
    with pytest.raises(ConfigError, match="the thread summary needs 1 tokens"):
        assemble(frags, budget=3, count_tokens=one_per_fragment)


def test_trimming_stops_as_soon_as_it_fits() -> None:
    def by_length(text: str) -> int:
        return len(text)

    big, small = ChatMessage("user", "x" * 50), ChatMessage("assistant", "y")
    frags: list[Fragment] = [Goal("g"), big, small, tool(1)]
    goal_cost = len(fragment_text(Goal("g")))
    tool_cost = len(fragment_text(tool(1)))
    bundle = assemble(frags, budget=goal_cost + 1 + tool_cost, count_tokens=by_length)
    assert bundle.history == (small, tool(1))
    assert bundle.trimmed == Trimmed(messages=1)


def test_over_budget_pinned_raises_config_error() -> None:
    with pytest.raises(ConfigError, match=r"need 3 tokens, 1 over the budget of 2"):
        assemble([*PINNED, msg(1)], budget=2, count_tokens=one_per_fragment)


def test_a_summary_that_does_not_fit_is_refused_by_name_not_dropped() -> None:
    def by_length(text: str) -> int:
        return len(text)

    pinned_cost = sum(len(fragment_text(f)) for f in PINNED)
    summary = Summary("what happened before: " + "x" * 100)
    summary_cost = len(fragment_text(summary))
    budget = pinned_cost + summary_cost - 1
    frags: list[Fragment] = [*PINNED, summary, msg(1)]
    with pytest.raises(ConfigError) as refused:
        assemble(frags, budget=budget, count_tokens=by_length)
    assert str(refused.value) == (
        f"the thread summary needs {summary_cost} tokens, 1 over the {summary_cost - 1} the "
        f"budget of {budget} leaves after the goal, constraints and checkpoint; it is never "
        "trimmed (the history it stands for is gone), so raise the budget or write a shorter "
        "summary"
    )
    # One token more and it is kept whole, the history trimmed around it.
    bundle = assemble(frags, budget=budget + 1, count_tokens=by_length)
    assert (bundle.summary, bundle.history) == (summary, ())


def test_custom_counter_is_used_for_every_fragment() -> None:
    seen: list[str] = []

    def counter(text: str) -> int:
        seen.append(text)
        return 10

    frags: list[Fragment] = [Goal("g"), Summary("s"), msg(1), tool(1)]
    bundle = assemble(frags, budget=30, count_tokens=counter)
    assert sorted(seen) == sorted(fragment_text(f) for f in frags)
    assert bundle.tokens_used == 30
    assert bundle.history == (tool(1),)
    assert bundle.summary == Summary("s")


def test_bad_counter_result_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="token counter returned -1"):
        assemble([Goal("g")], budget=10, count_tokens=lambda text: -1)


def test_default_counter() -> None:
    assert default_counter("") == FRAGMENT_OVERHEAD
    assert default_counter("abcd") == FRAGMENT_OVERHEAD + 1
    assert default_counter("abcde") == FRAGMENT_OVERHEAD + 2
    bundle = assemble([Goal("abcd")], budget=100)  # "Goal: abcd" is 10 characters
    assert bundle.tokens_used == FRAGMENT_OVERHEAD + 3


def test_latest_checkpoint_and_summary_win_one_goal_only() -> None:
    frags: list[Fragment] = [Checkpoint("c1"), Summary("s1"), Checkpoint("c2"), Summary("s2")]
    bundle = assemble(frags, budget=100)
    assert bundle.checkpoint == Checkpoint("c2")
    assert bundle.summary == Summary("s2")
    with pytest.raises(ConfigError, match="more than one Goal"):
        assemble([Goal("a"), Goal("b")], budget=100)


def test_bad_inputs() -> None:
    with pytest.raises(ConfigError, match="budget"):
        assemble([], budget=-1)
    with pytest.raises(ConfigError, match="not a context fragment"):
        assemble(["hello"], budget=10)  # type: ignore[list-item]


def test_tool_text_is_independent_of_args_order() -> None:
    a = ToolCallRecord("refund", {"order": 7, "amount": 5}, result="ok")
    b = ToolCallRecord("refund", {"amount": 5, "order": 7}, result="ok")
    assert fragment_text(a) == fragment_text(b) == 'refund({"amount":5,"order":7}) returned: ok'
    failed = ToolCallRecord("refund", {}, error="503")
    assert fragment_text(failed) == "refund({}) failed: 503"


def test_a_tool_calls_text_is_its_own_though_texts_are_kept_between_calls() -> None:
    """Texts are kept by record (a session renders the same history at every model call):
    a record made where a freed one was (CPython reuses the address) still gets its own."""
    kept = ToolCallRecord("refund", {"order": 1}, result="ok")
    assert fragment_text(kept) == fragment_text(kept) == 'refund({"order":1}) returned: ok'
    texts = [fragment_text(ToolCallRecord("t", {"i": i}, result=str(i))) for i in range(50)]
    assert texts == [f't({{"i":{i}}}) returned: {i}' for i in range(50)]


def test_render() -> None:
    frags: list[Fragment] = [*PINNED, Summary("s"), msg(1), tool(1), msg(2, "assistant")]
    rendered = assemble(frags, budget=100).render()
    assert rendered == [
        {
            "role": "system",
            "content": "Goal: refund order 7\nConstraint: never refund twice\n"
            "Summary of earlier work: s\nCheckpoint: c1",
        },
        {"role": "user", "content": "m1"},
        {"role": "tool", "content": 'search({"q":1}) returned: r1'},
        {"role": "assistant", "content": "m2"},
    ]
    assert assemble([msg(1)], budget=100).render(tool_role="user") == [
        {"role": "user", "content": "m1"}
    ]


def test_bundle_and_fragments_round_trip_through_msgspec() -> None:
    frags: list[Fragment] = [*PINNED, Summary("s"), msg(1), tool(1)]
    raw = msgspec.json.encode(frags)
    assert msgspec.json.decode(raw, type=list[Fragment]) == frags
    bundle = assemble(frags, budget=100)
    assert msgspec.json.decode(msgspec.json.encode(bundle), type=ContextBundle) == bundle


# -- properties -----------------------------------------------------------------------------

texts = st.text(max_size=40)
json_values = st.one_of(st.none(), st.booleans(), st.integers(), texts)
fragments = st.one_of(
    st.builds(Constraint, texts),
    st.builds(Checkpoint, texts),
    st.builds(Summary, texts),
    st.builds(ChatMessage, st.sampled_from(["user", "assistant"]), texts),
    st.builds(
        ToolCallRecord,
        st.sampled_from(["search", "refund"]),
        st.dictionaries(texts, json_values, max_size=3),
        st.none() | texts,
        st.none() | texts,
    ),
)
fragment_lists = st.tuples(st.none() | st.builds(Goal, texts), st.lists(fragments, max_size=25))


def never_trimmed_cost(frags: list[Fragment]) -> int:
    """What the goal, constraints, last checkpoint and last summary cost together."""
    checkpoints = [f for f in frags if isinstance(f, Checkpoint)]
    summaries = [f for f in frags if isinstance(f, Summary)]
    kept = [f for f in frags if isinstance(f, Goal | Constraint)] + checkpoints[-1:]
    return sum(default_counter(fragment_text(f)) for f in kept + summaries[-1:])


@given(fragment_lists, st.integers(min_value=0, max_value=600))
def test_assembly_is_deterministic_and_within_budget(
    goal_and_rest: tuple[Goal | None, list[Fragment]], budget: int
) -> None:
    goal, rest = goal_and_rest
    frags: list[Fragment] = ([goal] if goal is not None else []) + rest
    if never_trimmed_cost(frags) > budget:
        with pytest.raises(ConfigError):
            assemble(frags, budget=budget)
        return
    first = assemble(frags, budget=budget)
    second = assemble(list(frags), budget=budget)
    assert first == second
    assert msgspec.json.encode(first) == msgspec.json.encode(second)
    assert first.tokens_used <= budget
    kept: list[Fragment] = [
        *([first.goal] if first.goal is not None else []),
        *first.constraints,
        *([first.checkpoint] if first.checkpoint is not None else []),
        *([first.summary] if first.summary is not None else []),
        *first.history,
    ]
    assert first.tokens_used == sum(default_counter(fragment_text(f)) for f in kept)
    # nothing pinned is lost, and the history kept is the newest of each lane
    assert first.goal == goal
    assert first.constraints == tuple(f for f in frags if isinstance(f, Constraint))
    msgs = [f for f in frags if isinstance(f, ChatMessage)]
    tools = [f for f in frags if isinstance(f, ToolCallRecord)]
    assert len(first.messages) + first.trimmed.messages == len(msgs)
    assert len(first.tool_results) + first.trimmed.tool_results == len(tools)
    assert list(first.messages) == msgs[first.trimmed.messages :]
    assert list(first.tool_results) == tools[first.trimmed.tool_results :]
    # the fixed order: no tool result is trimmed while a message is kept; never the summary
    if first.trimmed.tool_results:
        assert not first.messages
    summaries = [f for f in frags if isinstance(f, Summary)]
    assert first.summary == (summaries[-1] if summaries else None)
    assert first.trimmed.summary == 0


def test_a_record_of_a_call_run_as_asked_encodes_as_before_modified_calls_were_kept() -> None:
    """A model call's recorded input holds these records, and is hashed (I5): a record of a
    call that ran as the model asked encodes exactly as before ``asked`` existed, so a step
    recorded by an older tether replays as recorded; an older record decodes as one that ran
    as asked."""
    record = ToolCallRecord(tool="refund", args={"order_id": "42"}, result="ok", turn=3)
    before = {
        "type": "ToolCallRecord",
        "tool": "refund",
        "args": {"order_id": "42"},
        "result": "ok",
        "error": None,
        "call_id": "",
        "turn": 3,
    }
    assert msgspec.msgpack.encode(record) == msgspec.msgpack.encode(before)
    assert msgspec.to_builtins(record) == before
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(before), type=ToolCallRecord) == record
    assert record.asked_args == {"order_id": "42"}
    assert fragment_text(record) == 'refund({"order_id":"42"}) returned: ok'


def test_a_record_of_a_modified_call_shows_the_call_asked_for_and_what_ran() -> None:
    record = ToolCallRecord(
        tool="refund",
        args={"order_id": "42", "amount_cents": 5000},
        result="refunded 5000",
        asked={"order_id": "42", "amount_cents": 7250},
    )
    assert record.asked_args == {"order_id": "42", "amount_cents": 7250}
    assert modified_note(record) == (
        'A person modified this call before it ran: it ran with {"amount_cents":5000,"order_id":"42"}.'
    )
    assert fragment_text(record) == (
        'refund({"amount_cents":7250,"order_id":"42"}) (A person modified this call before it '
        'ran: it ran with {"amount_cents":5000,"order_id":"42"}) returned: refunded 5000'
    )
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(record), type=ToolCallRecord)
    assert decoded == record
