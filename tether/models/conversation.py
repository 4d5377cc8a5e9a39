"""A context bundle as a provider's conversation: turns, tool calls with their ids, results.

Both provider adapters speak native tool calling: the model's earlier tool calls go back as
the provider's own assistant tool calls (under the call ids the provider issued, kept in the
journal on each ``ToolCallRecord``), each followed by its result, instead of being retold as
text. This module turns a bundle's history into that neutral shape; ``openai`` and
``anthropic`` only spell it in their wire format.

Invariants the adapters rely on:

* every call sent back has its result right after it: the calls of a turn are rebuilt from
  the history's records, so a call without a record (one the session never made, because its
  task ended first) is never sent, and a trimmed call takes its result with it;
* the calls of one model answer (records with the same ``turn``) stay one assistant turn, so
  parallel calls go back as they came; records from before turns were kept (``turn`` 0) are
  a turn each;
* the assistant text sent with a turn's calls is the model's own (the thought the session
  kept just before the records), never text tether made up;
* ids the provider did not give (a scripted model's calls, older records) are made up
  deterministically from the record's place, ``tether_<turn>_<n>``, so the same history
  always reads the same;
* a call a person modified before it ran goes back as the model asked for it (the assistant's
  call is the model's own), and its result starts by saying that a person modified it and
  with which arguments it ran.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import msgspec

from tether.actors.context import ChatMessage, ContextBundle, ToolCallRecord, modified_note
from tether.actors.messages import TOO_DEEP, nesting_problem
from tether.actors.model import Decision, FinalAnswer, ModelRequest, ToolCall, ToolCalls, Usage

_SHOWN = 500  # characters of malformed arguments quoted back to the model


class Said(msgspec.Struct, frozen=True):
    """A plain message: ``role`` is ``"user"`` or ``"assistant"``."""

    role: str
    text: str


class SentCall(msgspec.Struct, frozen=True):
    """One earlier tool call and its outcome, as it goes back to the provider."""

    call_id: str
    tool: str
    args: dict[str, Any]
    output: str  # the result, or the error
    is_error: bool

    @property
    def arguments(self) -> str:
        """The arguments as the JSON text a provider expects in a function call."""
        return json.dumps(self.args, ensure_ascii=False, sort_keys=True)


class ToolTurn(msgspec.Struct, frozen=True):
    """One model answer that called tools (``text`` is what it said with them, maybe
    nothing), with each call's outcome."""

    text: str
    calls: tuple[SentCall, ...]


Turn = Said | ToolTurn


def system_text(request: ModelRequest) -> str:
    """The system prompt: goal, constraints, summary and checkpoint, as the bundle renders
    them (one line each)."""
    context = request.context
    if context and context[0].get("role") == "system":
        return context[0].get("content", "")
    return ""


def opening_text(bundle: ContextBundle) -> str:
    """Text for a first user turn when the history does not start with one (the user's
    message was trimmed away) and the provider requires one: the checkpoint, which says what
    the task is, else the goal."""
    if bundle.checkpoint is not None:
        return f"Checkpoint: {bundle.checkpoint.text}"
    if bundle.goal is not None:
        return f"Goal: {bundle.goal.text}"
    return "Go on with the task."


def turns(bundle: ContextBundle) -> list[Turn]:
    """The bundle's history as turns, oldest first (see the module docstring)."""
    history = bundle.history
    out: list[Turn] = []
    i = 0
    while i < len(history):
        item = history[i]
        if isinstance(item, ChatMessage):
            following = history[i + 1] if i + 1 < len(history) else None
            if item.role == "assistant" and isinstance(following, ToolCallRecord):
                # The thought the session kept right before the answer's calls: it is that
                # answer's text (trimming drops messages oldest first, so an older message
                # cannot sit here while this answer's own thought is gone).
                i, turn = _tool_turn(history, i + 1, item.text)
                out.append(turn)
                continue
            out.append(_said(item))
            i += 1
        else:
            i, turn = _tool_turn(history, i, "")
            out.append(turn)
    return out


def _said(message: ChatMessage) -> Said:
    if message.role in ("user", "assistant"):
        return Said(message.role, message.text)
    # The session writes only user and assistant messages; another role keeps its name.
    return Said("user", f"[{message.role}] {message.text}")


def _tool_turn(
    history: Sequence[ChatMessage | ToolCallRecord], start: int, text: str
) -> tuple[int, ToolTurn]:
    """The turn of the records from ``start`` on that belong to one answer; the index after."""
    first = history[start]
    if not isinstance(first, ToolCallRecord):  # pragma: no cover - callers pass a record
        raise TypeError(f"not a tool call record: {first!r}")
    records = [first]
    end = start + 1
    while first.turn and end < len(history):
        nxt = history[end]
        if not (isinstance(nxt, ToolCallRecord) and nxt.turn == first.turn):
            break
        records.append(nxt)
        end += 1
    calls = tuple(_sent(record, start + n, n) for n, record in enumerate(records))
    return end, ToolTurn(text, calls)


def _sent(record: ToolCallRecord, position: int, n: int) -> SentCall:
    if record.call_id:
        call_id = record.call_id
    elif record.turn:
        call_id = f"tether_{record.turn}_{n}"
    else:
        call_id = f"tether_h{position}"
    if record.error is not None:
        output, is_error = record.error, True
    else:
        output, is_error = ("(nothing)" if record.result is None else record.result), False
    note = modified_note(record)
    if note:  # the call goes back as the model made it; its outcome says what ran instead
        output = f"{note}\n{output}"
    return SentCall(call_id, record.tool, dict(record.asked_args), output, is_error)


def answer(text: str, calls: Sequence[ToolCall], usage: Usage, nothing: str) -> Decision:
    """An answer as a decision: one call (with the text as its thought), several, or the
    text as the final answer; ``ValueError(nothing)`` if it has neither text nor a call (a
    broken gateway: it used to end the task as "finished" with an empty answer)."""
    if len(calls) == 1:
        return msgspec.structs.replace(calls[0], thought=text, usage=usage)
    if calls:
        return ToolCalls(calls=tuple(calls), thought=text, usage=usage)
    if not text:
        raise ValueError(nothing)
    return FinalAnswer(text=text, usage=usage)


def tool_call(name: object, call_id: object, arguments: object, shown: object) -> ToolCall:
    """One tool call of an answer, as the provider sent it. A call that names no tool is an
    error of the response (``shown`` is what it says it got); arguments that cannot be read go
    back to the model (``malformed``)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"the model's tool call names no tool: {shown!r}")
    args, problem = parse_arguments(arguments)
    return ToolCall(
        tool=name,
        args=args,
        call_id=call_id if isinstance(call_id, str) else "",
        malformed=problem,
    )


def parse_arguments(raw: object) -> tuple[dict[str, Any], str]:
    """A tool call's arguments as the provider sent them: ``(args, "")``, or ``({}, problem)``
    when they cannot be used (the problem goes back to the model as the call's result)."""
    if isinstance(raw, dict):
        args = raw  # Anthropic's input, and gateways that decode the arguments themselves
    elif isinstance(raw, str | bytes):
        text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        if not text.strip():
            return {}, ""  # a call of a tool without parameters
        try:
            args = json.loads(text)
        except json.JSONDecodeError as exc:
            return {}, f"the arguments are not valid JSON: {exc}: {_cut(text)}"
        except RecursionError:  # deeper than json's parser goes, so far beyond the limit
            return {}, f"the arguments cannot be stored: {TOO_DEEP}"
        if not isinstance(args, dict):
            return {}, f"the arguments are not a JSON object: {_cut(text)}"
    else:
        return {}, f"the arguments are not valid JSON: {_cut(repr(raw))}"
    try:
        encoded = msgspec.msgpack.encode(args)  # what the journal will have to store
        too_deep = nesting_problem(args, encoded)
    except (OverflowError, TypeError, ValueError) as exc:
        return {}, f"the arguments cannot be stored: {exc}"
    except RecursionError:
        too_deep = TOO_DEEP
    if too_deep is not None:
        # Told to the model, as invalid JSON is: recorded as they came, they could not be
        # stored, and the model's whole decision (the task with it) would be lost.
        return {}, f"the arguments cannot be stored: {too_deep}"
    return args, ""


def _cut(text: str) -> str:
    return text if len(text) <= _SHOWN else text[:_SHOWN] + f"... ({len(text)} characters)"


def object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's input schema as both providers want it: an object schema at the top.

    msgspec's schema of one Struct is a ``$ref`` into ``$defs``: the referenced object is
    inlined, and the other definitions it may use stay in ``$defs``.
    """
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.removeprefix("#/$defs/")
        definitions = schema.get("$defs", {})
        inner = dict(definitions.get(name, {}))
        others = {k: v for k, v in definitions.items() if k != name}
        if others:
            inner["$defs"] = others
        inner.pop("title", None)
        return inner
    return schema


def int_field(value: object) -> int:
    """A token count from a provider's usage object: an int >= 0, else 0 (a gateway that
    leaves it out or sends null)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
