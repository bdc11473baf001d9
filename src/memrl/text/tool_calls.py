"""Parse tool calls out of model text, and render a ChatML tool-calling conversation.

Parsers turn one assistant message into (text for the user, tool calls, parse
errors). ``hermes`` reads ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
blocks (Qwen 2.5/3, Hermes, SmolLM); ``json`` reads a message that is only a JSON
object (or list of them) with ``name`` and ``arguments``. Both also read the
OpenAI form ``{"type": "function", "function": {"name": ..., "arguments": "<json>"}}``,
whose arguments are a JSON string. A block that does not parse is an *invalid*
call: it is reported back to the model as an error and counted in the tool-call
validity metric.

Prompts: ``ChatFormat`` writes ChatML itself (``qwen``, ``hermes``); ``TemplateFormat``
uses the tokenizer's own chat template with ``tools=`` (``template``). ``openai_messages``
and ``read_openai_call`` are the same conversation and calls as OpenAI chat messages, for
``workflow.options.tool_protocol=openai_chat``.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from memrl.envs.messages import Message, ToolCall

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)


@dataclass
class ParsedTurn:
    content: str
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


MAX_ARG_DEPTH = 100  # arguments nested deeper are an invalid call (a tool takes a few levels at most)


def _loads(text: str) -> Any:
    """``json.loads``, with JSON nested past Python's recursion limit (``[[[[...``, which a sampling policy can
    write) read as unparseable: a ValueError, like any other bad call, not a RecursionError that ends the
    episode."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _depth(value: Any) -> int:
    """How many containers deep ``value`` nests (without recursion: it may be nested hundreds deep)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            stack += [(v, level + 1) for v in (item.values() if isinstance(item, dict) else item)]
    return deepest


def _to_call(obj: Any) -> ToolCall:
    if isinstance(obj, dict) and isinstance(obj.get("function"), dict) and "name" not in obj:
        obj = obj["function"]  # OpenAI's wrapper {"type": "function", "function": {name, arguments}}
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        raise ValueError('a tool call must be a JSON object with a string "name"')
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # OpenAI-style arguments given as a JSON string ("" for none)
        args = _loads(args) if args.strip() else {}
    if not isinstance(args, dict):
        raise ValueError('"arguments" must be a JSON object')
    if _depth(args) > MAX_ARG_DEPTH:  # the episode's log is copied and dumped recursively downstream
        raise ValueError(f'"arguments" nested more than {MAX_ARG_DEPTH} levels deep')
    return ToolCall(obj["name"], args)


def parse_hermes(text: str) -> ParsedTurn:
    turn = ParsedTurn(_BLOCK.sub("", text).strip())
    for m in _BLOCK.finditer(text):
        body = m.group(1).strip()
        if not m.group(0).endswith("</tool_call>"):
            turn.errors.append("unclosed <tool_call> block")
            continue
        try:
            turn.calls.append(_to_call(_loads(body)))
        except (json.JSONDecodeError, ValueError) as err:
            turn.errors.append(f"could not parse tool call {body[:80]!r}: {err}")
    return turn


def parse_json(text: str) -> ParsedTurn:
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return ParsedTurn(stripped)
    try:
        obj = _loads(stripped)
        objs = obj if isinstance(obj, list) else [obj]
        return ParsedTurn("", [_to_call(o) for o in objs])
    except (json.JSONDecodeError, ValueError) as err:
        return ParsedTurn("", errors=[f"could not parse tool call: {err}"])


PARSERS: dict[str, Callable[[str], ParsedTurn]] = {"hermes": parse_hermes, "json": parse_json}


def get_parser(name: str) -> Callable[[str], ParsedTurn]:
    if name not in PARSERS:
        raise ValueError(f"unknown tool parser {name!r}; choose {', '.join(PARSERS)}")
    return PARSERS[name]


def render_call(call: ToolCall) -> str:
    """An assistant tool call as the model should write it (hermes format)."""
    return "<tool_call>\n" + json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False) \
        + "\n</tool_call>"


@dataclass(frozen=True)
class ChatFormat:
    """ChatML rendering of a tool conversation, one segment at a time.

    ``tool_role`` is the role that carries tool results: ``user`` with
    ``<tool_response>`` blocks (Qwen 2.5/3) or ``tool`` (Hermes).
    """

    tool_role: str = "user"
    end: str = "<|im_end|>"

    def turn(self, role: str, text: str) -> str:
        return f"<|im_start|>{role}\n{text}{self.end}\n"

    @property
    def assistant_start(self) -> str:
        return "<|im_start|>assistant\n"

    def system(self, policy: str, tools: Sequence[dict[str, Any]]) -> str:
        lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        return self.turn("system", f"{policy.strip()}\n\n# Tools\n\nYou may call one or more functions to assist "
                         "with the user query.\n\nYou are provided with function signatures within <tools></tools> "
                         f"XML tags:\n<tools>\n{lines}\n</tools>\n\nFor each function call, return a json object "
                         "with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                         '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')

    def tool_results(self, results: Sequence[str]) -> str:
        body = "\n".join(f"<tool_response>\n{r}\n</tool_response>" for r in results)
        return self.turn(self.tool_role, body)

    def history(self, msgs: Sequence[Message]) -> str:
        """Earlier turns of a log as the agent sees them (calls written in the hermes form)."""
        out = []
        for m in msgs:
            if hidden_from_agent(m):
                continue
            if m.role == "tool":
                out.append(self.tool_results([m.content or ""]))
            elif m.role == "assistant":
                text = "\n".join([m.content or ""] + [render_call(c) for c in m.tool_calls]).strip()
                out.append(self.turn("assistant", text))
            elif m.role == "user":
                out.append(self.turn("user", m.content or ""))
        return "".join(out)

    def prompt(self, policy: str, tools: Sequence[dict[str, Any]], msgs: Sequence[Message]) -> str:
        """The episode's first prompt, ending where the agent's first turn starts."""
        return self.system(policy, tools) + self.history(msgs) + self.assistant_start

    def after_tool_results(self, results: Sequence[str]) -> str:
        """What follows a closed agent turn: the results, then the start of the agent's next turn."""
        return "\n" + self.tool_results(results) + self.assistant_start

    def after_user(self, text: str) -> str:
        return "\n" + self.turn("user", text) + self.assistant_start


FORMATS = {"qwen": ChatFormat("user"), "hermes": ChatFormat("tool")}


class TemplateFormat:
    """The tokenizer's own chat template with ``tools=`` (``workflow.options.tool_format=template``).

    This is the prompt an OpenAI-compatible server (vLLM, SGLang) builds from the same messages
    and tools, so a model trained in token mode sees what it will see when served. Later segments
    stay token-in/token-out: each is the difference between rendering a fixed two-message
    conversation with and without the new messages, behind the separator the template puts after
    an agent turn's end token. A template whose earlier turns change when more follow cannot be
    cut this way and is refused when the episode starts.
    """

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("workflow.options.tool_format=template needs a tokenizer with a chat template; "
                             "use workflow.options.tool_format=qwen or hermes")
        self.tokenizer = tokenizer
        self.end = ""
        self._base: list[dict[str, Any]] = []
        self._tools: list[dict[str, Any]] = []
        self._tail = ""

    def _render(self, messages: list[dict[str, Any]], generation: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tools=self._tools or None, tokenize=False,
                                                  add_generation_prompt=generation)

    def prompt(self, policy: str, tools: Sequence[dict[str, Any]], msgs: Sequence[Message]) -> str:
        self._tools = [dict(t) for t in tools]
        self._base = [{"role": "system", "content": policy}, {"role": "user", "content": "?"}]
        closed = self._render(self._base + [{"role": "assistant", "content": "!"}], False)
        after = closed[closed.rindex("!") + 1:]  # the end of an agent turn and what separates it from the next
        ends = sorted((t for t in self._stop_strings() if after.startswith(t)), key=len)
        if not ends:
            raise ValueError("workflow.options.tool_format=template: the chat template closes an assistant turn with "
                             f"{after[:40]!r}, which starts with no stop token of this tokenizer")
        self.end, self._tail = ends[-1], after[len(ends[-1]):]
        return self._render(agent_chat(policy, msgs, json_arguments=False), True)

    def _stop_strings(self) -> list[str]:
        from memrl.text.tokens import stop_token_ids

        return [self.tokenizer.convert_ids_to_tokens(i) for i in stop_token_ids(self.tokenizer)]

    def _after(self, new: list[dict[str, Any]]) -> str:
        before = self._render(self._base, False)
        full = self._render(self._base + new, True)
        if not full.startswith(before):
            raise ValueError("workflow.options.tool_format=template: this chat template renders earlier turns "
                             "differently once more follow, so turns cannot be appended as tokens; use "
                             "workflow.options.tool_format="
                             "qwen or hermes")
        return self._tail + full[len(before):]

    def after_tool_results(self, results: Sequence[str]) -> str:
        return self._after([{"role": "tool", "tool_call_id": f"call_{i}", "content": r} for i, r in enumerate(results)])

    def after_user(self, text: str) -> str:
        return self._after([{"role": "user", "content": text}])


def hidden_from_agent(m: Message) -> bool:
    """The user's own device calls and their results (dual control) are not the agent's to see."""
    return m.role == "tool" and m.requestor == "user" or m.role == "user" and (bool(m.tool_calls) or not m.content)


def openai_call(call: ToolCall, call_id: str, json_arguments: bool = True, ascii_json: bool = False) -> dict[str, Any]:
    """An agent's tool call as an OpenAI ``tool_calls`` entry.

    The API carries arguments as a JSON string; Hugging Face chat templates expect the object
    (``json_arguments=False``), which is also what vLLM hands its template. ``ascii_json``: the string
    as τ²-bench writes a call back into its models' chats (``json.dumps`` defaults, non-ASCII escaped).
    """
    args = json.dumps(call.arguments, ensure_ascii=ascii_json) if json_arguments else dict(call.arguments)
    return {"id": call_id, "type": "function", "function": {"name": call.name, "arguments": args}}


def read_openai_call(raw: Any, fallback_id: str) -> tuple[str, ToolCall | None, str | None]:
    """(id, call, error) of one ``message.tool_calls`` entry from a server.

    Arguments arrive as a JSON string that the model wrote; when it is not a JSON object the
    call is invalid, and ``error`` is what the model is told in the tool message answering it.
    """
    call_id = raw.get("id") if isinstance(raw, dict) and isinstance(raw.get("id"), str) and raw["id"] else fallback_id
    try:
        call = _to_call(raw)
    except json.JSONDecodeError as err:
        fn = raw.get("function") if isinstance(raw.get("function"), dict) else raw
        name = fn.get("name")
        return call_id, None, f"could not parse the arguments of tool call {name!r}: {err}"
    except (ValueError, AttributeError) as err:
        return call_id, None, f"could not parse tool call {json.dumps(raw)[:80]!r}: {err}"
    return call_id, ToolCall(call.name, call.arguments, id=call_id), None


def openai_messages(policy: str, msgs: Sequence[Message]) -> list[dict[str, Any]]:
    """The agent's view of a message log as OpenAI chat messages, behind a system message holding the policy."""
    return agent_chat(policy, msgs, json_arguments=True)


def agent_chat(policy: str, msgs: Sequence[Message], json_arguments: bool) -> list[dict[str, Any]]:
    """``openai_messages``, with arguments as JSON text (the API) or as objects (chat templates).

    Shows what ``ChatFormat`` shows in token mode: the user's own device calls and their results are
    left out. Calls without ids (a task's scripted history) get ``call_N``; a tool message answers
    the oldest unanswered call, so ids pair up as the API requires.
    """
    out: list[dict[str, Any]] = [{"role": "system", "content": policy}]
    unanswered: list[str] = []
    for m in msgs:
        if hidden_from_agent(m):
            continue
        if m.role == "assistant":
            ids = [c.id or f"call_{len(out)}_{i}" for i, c in enumerate(m.tool_calls)]
            entry: dict[str, Any] = {"role": "assistant", "content": m.content}
            if m.tool_calls:
                entry["tool_calls"] = [openai_call(c, i, json_arguments) for c, i in zip(m.tool_calls, ids)]
            unanswered = ids
            out.append(entry)
        elif m.role == "tool":
            call_id = unanswered.pop(0) if unanswered else m.call_id
            out.append({"role": "tool", "tool_call_id": call_id, "content": m.content or ""})
        elif m.role in ("user", "system"):
            out.append({"role": m.role, "content": m.content or ""})
    return out


ToolParser = Callable[[str], ParsedTurn]


@dataclass
class ToolAnswer:
    """One answer split into the text the program sees and its OpenAI tool calls."""

    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    invalid: int = 0


def split_tool_calls(text: str, parser: ToolParser) -> ToolAnswer:
    """``text`` as OpenAI message fields: content (None when only calls remain) and ``tool_calls``.

    As vLLM's hermes parser does, an answer whose calls do not parse stays plain content (its invalid
    calls counted), and each call gets a fresh ``call_...`` id."""
    turn = parser(text)
    if not isinstance(turn, ParsedTurn):
        raise TypeError(f"a tool parser must return a ParsedTurn, got {type(turn).__name__}")
    if turn.errors or not turn.calls:
        return ToolAnswer(text, invalid=len(turn.errors))
    calls = [openai_call(c, f"call_{uuid.uuid4().hex[:24]}") for c in turn.calls]
    return ToolAnswer(turn.content or None, calls)
