"""``tether.mcp.tools(server)``: an MCP server's tools as tether tools.

Each tool the server lists becomes a :class:`tether.Tool` made with ``Tool.from_schema``:
its name (with an optional prefix), its description and its ``inputSchema`` are what the
model sees, and the arguments are validated against that schema (by ``jsonschema``) before
anything is recorded. A call goes through the effects ledger like any tool's; the
runtime's idempotency key reaches the server in the request's ``_meta`` under
``"tether/idempotency_key"`` (:data:`KEY_META`), and also as an argument when the tool's
schema declares one of :data:`KEY_ARGUMENTS` (a string property): that argument is taken out
of the schema the model sees, and filled in by the runtime.

The recovery policy comes from the server's annotations unless the developer says otherwise
(``options=``): ``readOnlyHint`` or ``idempotentHint`` → ``recovery="retry"``; anything else
→ ``"quarantine"``; ``destructiveHint`` → ``requires_approval=True``.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypedDict

import anyio
from typing_extensions import Unpack

from tether.actors.tool import Recovery, Tool
from tether.errors import ConfigError
from tether.mcp.connection import link_for
from tether.mcp.errors import McpToolError
from tether.mcp.link import Link
from tether.mcp.servers import McpServer, register

if TYPE_CHECKING:
    from mcp.types import CallToolResult, ToolAnnotations
    from mcp.types import Tool as McpTool

#: Argument names that carry the idempotency key when a tool's input schema declares them
#: (as a string): the runtime fills them in, the model never sees them.
KEY_ARGUMENTS = ("idempotency_key", "idempotencyKey")
#: What ``options=`` may set per tool: ``@tether.tool``'s options, and ``name``.
OPTION_NAMES = frozenset(
    {
        "name",
        "description",
        "recovery",
        "requires_approval",
        "timeout",
        "retry",
        "breaker",
        "reconcile",
    }
)


class Choices(TypedDict, total=False):
    """Which tools, and how (see :func:`tools`)."""

    prefix: str
    only: Iterable[str] | None
    options: Mapping[str, Mapping[str, Any]] | None
    defaults: Mapping[str, Any] | None


def tools(server: McpServer, **choices: Unpack[Choices]) -> tuple[Tool, ...]:
    """List ``server``'s tools and return them as tether tools, ready for
    ``AgentSession.tools``. It connects once to list them (a stdio server is started and
    stopped again), from a thread of its own, so it works at import time and inside a
    running event loop alike; in async code ``await tether.mcp.load_tools(...)`` does the
    same without a thread.

    ``prefix`` goes before every tool's name (``"fs_"``: ``fs_read_file``). ``only`` keeps
    the named tools (the server's names). ``options`` maps a server's tool name to
    ``@tether.tool`` options that override what its annotations say (``recovery``,
    ``requires_approval``, ``timeout``, ``retry``, ``breaker``, ``reconcile``,
    ``description``, and ``name``); ``defaults`` applies options to every tool, under the
    per-tool ones.
    """
    listed: list[McpTool] = []
    failure: list[BaseException] = []

    def listing() -> None:
        try:
            listed.extend(anyio.run(_list, server))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread below
            failure.append(exc)

    register(server)
    worker = threading.Thread(target=listing, name=f"tether.mcp list {server.name}")
    worker.start()
    worker.join()
    if failure:
        raise failure[0]
    return build(server, listed, **choices)


async def load_tools(server: McpServer, **choices: Unpack[Choices]) -> tuple[Tool, ...]:
    """:func:`tools`, awaited in the running event loop."""
    register(server)
    return build(server, await _list(server), **choices)


def _require_sdk() -> None:
    """Fail at once, saying what to install, when the mcp SDK is missing."""
    import importlib.util

    if importlib.util.find_spec("mcp") is None or importlib.util.find_spec("jsonschema") is None:
        raise ConfigError("tether.mcp needs the mcp SDK and jsonschema: pip install 'tether[mcp]'")


async def _list(server: McpServer) -> list[McpTool]:
    _require_sdk()
    async with _connected(server) as link:
        return await link.list_tools()


@asynccontextmanager
async def _connected(server: McpServer) -> AsyncIterator[Link]:
    """A link of our own for one use (listing, a call outside any runtime), entered and
    exited in the caller's task, whose task group runs the link."""
    link = Link(server)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(link.run)
            try:
                await link.wait_up(server.connect_timeout)
                yield link
            finally:
                link.close()
    except BaseExceptionGroup as group:
        # The task group may wrap what its body raised (McpNotConnected, the call's own
        # error): the caller gets that error, as from any tool. (link.run raises nothing.)
        if len(group.exceptions) == 1 and isinstance(group.exceptions[0], Exception):
            error = group.exceptions[0]
            raise error from error.__cause__  # not from the group, which holds it
        raise


def build(server: McpServer, listed: list[McpTool], **choices: Unpack[Choices]) -> tuple[Tool, ...]:
    """The tether tools of the server's ``listed`` tools (see :func:`tools`)."""
    where = f"tether.mcp.tools({server.name!r})"
    prefix, only = choices.get("prefix", ""), choices.get("only")
    options, defaults = choices.get("options"), choices.get("defaults")
    if not isinstance(prefix, str):
        raise ConfigError(f"{where}: prefix must be a string, not {prefix!r}")
    names = [t.name for t in listed]
    wanted = None if only is None else _names(where, "only", only, names)
    per_tool = dict(options or {})
    _names(where, "options", per_tool, names)
    common = _options(where, "defaults", defaults or {})
    made: list[Tool] = []
    for listed_tool in listed:
        if wanted is not None and listed_tool.name not in wanted:
            continue
        chosen = {**common, **_options(where, listed_tool.name, per_tool.get(listed_tool.name, {}))}
        made.append(_tool(server, listed_tool, prefix, chosen))
    return tuple(made)


def _names(where: str, what: str, given: Iterable[str], names: list[str]) -> set[str]:
    chosen = set(given)
    unknown = sorted(chosen - set(names))
    if unknown:
        raise ConfigError(
            f"{where}: {what} names tools the server does not list: {', '.join(unknown)} "
            f"(it lists: {', '.join(names) or 'none'})"
        )
    return chosen


def _options(where: str, tool: str, given: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(given, Mapping):
        raise ConfigError(f"{where}: the options of {tool!r} must be a mapping, not {given!r}")
    unknown = sorted(set(given) - OPTION_NAMES)
    if unknown:
        raise ConfigError(
            f"{where}: unknown option(s) for {tool!r}: {', '.join(unknown)} "
            f"(options: {', '.join(sorted(OPTION_NAMES))})"
        )
    return dict(given)


def policy(annotations: ToolAnnotations | None) -> tuple[Recovery, bool]:
    """``(recovery, requires_approval)`` from a tool's annotations (module docstring). The
    hints are the server's word; ``options=`` overrides them for a server not trusted."""
    read_only = annotations is not None and annotations.read_only_hint is True
    idempotent = annotations is not None and annotations.idempotent_hint is True
    destructive = annotations is not None and annotations.destructive_hint is True
    recovery: Recovery = "retry" if read_only or idempotent else "quarantine"
    return recovery, destructive and not read_only


def _tool(server: McpServer, listed: McpTool, prefix: str, chosen: dict[str, Any]) -> Tool:
    name = chosen.pop("name", None) or f"{prefix}{listed.name}"
    where = f"tool {name!r} of MCP server {server.name!r}"
    schema, key_arguments = _model_schema(dict(listed.input_schema or {}), where)
    recovery, requires_approval = policy(listed.annotations)
    chosen.setdefault("recovery", recovery)
    chosen.setdefault("requires_approval", requires_approval)
    description = chosen.pop("description", None) or listed.description or listed.title or ""
    remote = listed.name

    async def call(idempotency_key: str, **arguments: Any) -> Any:
        for argument in key_arguments:
            arguments[argument] = idempotency_key
        result = await _call(server, name, remote, arguments, idempotency_key)
        if result.is_error:
            raise McpToolError(name, _text(result) or "the tool reported an error")
        return result_value(result)

    # Named for logs; its qualname stays a local one, so the tool has no import path (another
    # process cannot import it: it is made from the server's listing, in this process).
    call.__name__ = name
    return Tool.from_schema(
        call,
        name=name,
        input_schema=schema,
        validator=_validator(schema, key_arguments, where),
        description=description,
        takes_key=True,
        **chosen,
    )


async def _call(
    server: McpServer, tool: str, remote: str, arguments: dict[str, Any], key: str
) -> CallToolResult:
    """Through the runtime's supervised connection when called by the effect path; through
    a connection of its own when the tool is called directly (tests, scripts)."""
    from tether.runtime.step import current_step

    step = current_step.get()
    if step is None:
        async with _connected(server) as own:
            return await own.call(tool, remote, arguments, key)
    link = await link_for(step.cell.runtime, server, tool)
    return await link.call(tool, remote, arguments, key)


def _model_schema(schema: dict[str, Any], where: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The input schema the model sees (without the key arguments), and the key arguments."""
    if schema.get("type") != "object":
        raise ConfigError(f'{where}: its inputSchema is not a JSON Schema with "type": "object"')
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return schema, ()
    keys = tuple(
        k
        for k in KEY_ARGUMENTS
        if isinstance(properties.get(k), Mapping)
        and properties[k].get("type", "string") == "string"
    )
    if not keys:
        return schema, ()
    shown = dict(schema)
    shown["properties"] = {k: v for k, v in properties.items() if k not in keys}
    required = schema.get("required")
    if isinstance(required, list):
        shown["required"] = [r for r in required if r not in keys]
    return shown, keys


def _validator(
    schema: dict[str, Any], key_arguments: tuple[str, ...], where: str
) -> Callable[[dict[str, Any]], object]:
    """Checks arguments against ``schema``, naming the first problem and where it is."""
    import jsonschema  # type: ignore[import-untyped]  # the mcp SDK depends on it

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ConfigError(
            f"{where}: its inputSchema is not a valid JSON Schema: {exc.message}"
        ) from None
    checker = cls(schema)

    def validate(args: dict[str, Any]) -> None:
        supplied = [k for k in key_arguments if k in args]
        if supplied:
            raise ValueError(f"{supplied[0]!r} is supplied by the runtime, never by the caller")
        error = jsonschema.exceptions.best_match(checker.iter_errors(args))
        if error is not None:
            path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
            raise ValueError(f"{error.message} - at `${path}`")

    return validate


def result_value(result: CallToolResult) -> Any:
    """What a call returns: the structured content when the server gives one; else the text
    when every content block is text; else the content blocks as JSON objects."""
    if result.structured_content is not None:
        return result.structured_content
    text = _text(result)
    if text is not None and all(getattr(c, "type", None) == "text" for c in result.content):
        return text
    return [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in result.content]


def _text(result: CallToolResult) -> str | None:
    texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]  # type: ignore[union-attr]
    return "\n".join(texts) if texts else None
