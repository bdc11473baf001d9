"""Tool calls in a generated answer, as OpenAI ``message.tool_calls`` (``workflow.options.tool_parser``).

The parsers are those of the token-mode tool agent (:mod:`memrl.text.tool_calls`):
``hermes`` reads ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, the
format of Qwen 2.5/3, Hermes and SmolLM (``qwen`` is accepted as its other name), and
``json`` reads an answer that is only a JSON call. Your own parser plugs in by import
path (``my_pkg.parsers:mistral``): a function ``text -> ParsedTurn``.

As vLLM's hermes parser does, an answer whose calls do not parse is returned as plain
content with no ``tool_calls``: the program sees what the model wrote, and the episode
counts the invalid call (``invalid_tool_calls``).
"""

from __future__ import annotations

from memrl.text.tool_calls import PARSERS, ToolAnswer, ToolParser, get_parser, split_tool_calls  # noqa: F401

_ALIASES = {"qwen": "hermes"}


def resolve_tool_parser(name: str) -> ToolParser:
    """The parser called ``name`` (a built-in or ``package.module:function``), or a one-line ValueError."""
    if ":" in name:
        from memrl.plugins import load_object

        parser = load_object(name, "tool parser")
        if not callable(parser):
            raise ValueError(f"tool parser {name!r} is not a function (text) -> ParsedTurn")
        return parser  # type: ignore[no-any-return]
    name = _ALIASES.get(name, name)
    if name not in PARSERS:
        raise ValueError(f"unknown tool parser {name!r}: choose {', '.join([*PARSERS, *_ALIASES])} "
                         "or give an import path 'package.module:function'")
    return get_parser(name)
