"""The tool-call text format moved to :mod:`memrl.text.tool_calls` (the user simulator reads it too).

This name stays for the importers that have not moved yet; new code imports ``memrl.text.tool_calls``.
"""

from memrl.text.tool_calls import (  # noqa: F401  (re-exported)
    FORMATS,
    ChatFormat,
    ParsedTurn,
    TemplateFormat,
    agent_chat,
    get_parser,
    hidden_from_agent,
    openai_call,
    openai_messages,
    parse_hermes,
    parse_json,
    read_openai_call,
    render_call,
)
