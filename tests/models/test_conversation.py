"""``tether.models.conversation``: a bundle's history as provider-neutral turns."""

from __future__ import annotations

from tether.actors.context import ChatMessage, Fragment, ToolCallRecord, assemble
from tether.models.conversation import Said, SentCall, ToolTurn, turns


def record(
    order: str, *, call_id: str = "", turn: int = 0, error: str | None = None
) -> ToolCallRecord:
    result = None if error else f"order {order}: delivered"
    return ToolCallRecord(
        "lookup_order", {"order_id": order}, result=result, error=error, call_id=call_id, turn=turn
    )


def sent(order: str, call_id: str, *, error: str | None = None) -> SentCall:
    output = error if error else f"order {order}: delivered"
    return SentCall(call_id, "lookup_order", {"order_id": order}, output, error is not None)


def test_the_calls_of_one_answer_stay_one_turn_and_the_next_answer_is_another() -> None:
    history: list[Fragment] = [
        ChatMessage("user", "42, 43 and 44?"),
        ChatMessage("assistant", "Two first."),
        record("42", call_id="call_a", turn=1),
        record("43", call_id="call_b", turn=1),
        record("44", call_id="call_c", turn=2),  # the next answer said nothing: still apart
        ChatMessage("assistant", "All delivered."),
    ]
    assert turns(assemble(history, budget=10_000)) == [
        Said("user", "42, 43 and 44?"),
        ToolTurn("Two first.", (sent("42", "call_a"), sent("43", "call_b"))),
        ToolTurn("", (sent("44", "call_c"),)),
        Said("assistant", "All delivered."),
    ]


def test_calls_without_a_providers_id_get_ids_made_from_their_place() -> None:
    history: list[Fragment] = [
        record("42", turn=3),
        record("43", turn=3),
        record("44"),  # from before turns were kept: a turn of its own
        record("45", error="timed out"),
    ]
    assert turns(assemble(history, budget=10_000)) == [
        ToolTurn("", (sent("42", "tether_3_0"), sent("43", "tether_3_1"))),
        ToolTurn("", (sent("44", "tether_h2"),)),
        ToolTurn("", (sent("45", "tether_h3", error="timed out"),)),
    ]
    # The same history always reads the same.
    assert turns(assemble(history, budget=10_000)) == turns(assemble(history, budget=10_000))


def test_a_trimmed_history_keeps_every_call_with_its_result() -> None:
    history: list[Fragment] = [
        ChatMessage("user", "42 and 43?"),
        ChatMessage("assistant", "Looking."),
        record("42", call_id="call_a", turn=1),
        record("43", call_id="call_b", turn=1),
    ]
    small = assemble(history, budget=20)  # messages go first, then the oldest tool result
    kept = turns(small)
    assert kept == [ToolTurn("", (sent("43", "call_b"),))]
