"""Tool-call parsers."""

from __future__ import annotations

from memrl.envs.messages import Message, ToolCall
from memrl.text.tool_calls import (FORMATS, get_parser, openai_messages, parse_hermes, parse_json,
                                   read_openai_call)


def test_hermes_reads_several_calls_and_keeps_text():
    text = ('Let me check.\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
            '<tool_call>{"name": "b", "arguments": "{\\"y\\": [1, 2]}"}</tool_call>')
    turn = parse_hermes(text)
    assert turn.content == "Let me check."
    assert [(c.name, c.arguments) for c in turn.calls] == [("a", {"x": 1}), ("b", {"y": [1, 2]})]
    assert turn.errors == []


def test_hermes_reports_bad_blocks_as_errors():
    turn = parse_hermes('<tool_call>{"name": "a", "arguments": {</tool_call> ok <tool_call>{"arguments": {}}'
                        '</tool_call><tool_call>{"name": "c"')
    assert turn.calls == []
    assert len(turn.errors) == 3
    assert "could not parse" in turn.errors[0] and 'string "name"' in turn.errors[1]
    assert turn.errors[2] == "unclosed <tool_call> block"
    assert parse_hermes('<tool_call>{"name": "a", "arguments": [1]}</tool_call>').errors == [
        'could not parse tool call \'{"name": "a", "arguments": [1]}\': "arguments" must be a JSON object']


def test_plain_text_has_no_calls():
    assert parse_hermes("The loan is returned.").calls == []
    assert parse_json("The loan is returned.").content == "The loan is returned."


def test_json_parser():
    assert [c.name for c in parse_json('[{"name": "a", "arguments": {}}, {"name": "b"}]').calls] == ["a", "b"]
    assert parse_json('{"name": 3}').errors
    assert get_parser("json") is parse_json


def test_formats_put_tool_results_in_the_right_role():
    assert FORMATS["qwen"].tool_results(["r"]) == "<|im_start|>user\n<tool_response>\nr\n</tool_response><|im_end|>\n"
    assert FORMATS["hermes"].tool_results(["r"]).startswith("<|im_start|>tool\n")


def test_openai_style_calls_in_text():
    wrapped = '{"type": "function", "function": {"name": "a", "arguments": "{\\"x\\": 1}"}}'
    turn = parse_hermes(f"<tool_call>{wrapped}</tool_call>")
    assert [(c.name, c.arguments) for c in turn.calls] == [("a", {"x": 1})] and turn.errors == []
    assert [(c.name, c.arguments) for c in parse_json(f"[{wrapped}]").calls] == [("a", {"x": 1})]
    assert parse_json('{"type": "function", "function": {"name": "b", "arguments": ""}}').calls[0].arguments == {}
    bad = parse_hermes('<tool_call>{"type": "function", "function": {"name": "a", "arguments": "{x"}}</tool_call>')
    assert bad.calls == [] and "could not parse tool call" in bad.errors[0]


def test_read_openai_call():
    call_id, call, err = read_openai_call(
        {"id": "c9", "type": "function", "function": {"name": "a", "arguments": '{"x": [1]}'}}, "fallback")
    assert (call_id, call, err) == ("c9", ToolCall("a", {"x": [1]}, id="c9"), None)
    call_id, call, err = read_openai_call({"type": "function", "function": {"name": "a", "arguments": "{"}}, "f1")
    assert call_id == "f1" and call is None and err.startswith("could not parse the arguments of tool call 'a'")
    _, call, err = read_openai_call({"id": "c", "function": {"name": "a", "arguments": "[1]"}}, "f")
    assert call is None and '"arguments" must be a JSON object' in err
    _, call, err = read_openai_call({"id": "c", "function": {"arguments": "{}"}}, "f")
    assert call is None and 'string "name"' in err


def test_openai_messages_pair_ids_and_hide_the_users_device_calls():
    log = [Message("assistant", "Hi"), Message("user", "Help"),
           Message("assistant", None, [ToolCall("a", {"x": 1}), ToolCall("b", {}, id="given")]),
           Message("tool", "ra", call_id="call_1"), Message("tool", "rb", call_id="given"),
           Message("user", None, [ToolCall("toggle", {}, requestor="user")]),
           Message("tool", "on", requestor="user"), Message("user", "Done")]
    chat = openai_messages("POLICY", log)
    assert [m["role"] for m in chat] == ["system", "assistant", "user", "assistant", "tool", "tool", "user"]
    assert chat[0] == {"role": "system", "content": "POLICY"}
    calls = chat[3]["tool_calls"]
    assert calls[0]["function"] == {"name": "a", "arguments": '{"x": 1}'} and calls[1]["id"] == "given"
    assert [m["tool_call_id"] for m in chat[4:6]] == [c["id"] for c in calls]
    assert chat[3]["content"] is None and chat[-1] == {"role": "user", "content": "Done"}


def test_json_nested_past_the_stack_is_an_invalid_call_not_a_crash():
    """A sampling policy can write ``[[[[...`` 100k deep: json.loads raises RecursionError, which must read as an
    unparseable call (the policy is told, the episode goes on), as any other bad JSON."""
    from memrl.text.tool_calls import parse_hermes, parse_json, read_openai_call

    deep = "[" * 100_000 + "]" * 100_000
    turn = parse_hermes(f'<tool_call>{{"name": "f", "arguments": {{"a": {deep}}}}}</tool_call>')
    assert not turn.calls and "nested too deeply" in turn.errors[0]
    assert "nested too deeply" in parse_json(deep).errors[0]
    _, call, error = read_openai_call({"id": "c1", "function": {"name": "f", "arguments": f'{{"a": {deep}}}'}}, "x")
    assert call is None and "nested too deeply" in error


def test_arguments_nested_deeper_than_the_log_can_copy_are_refused():
    """500 levels parse (json's own limit is ~1,000) but the episode log is copied recursively downstream."""
    from memrl.envs.messages import Message
    from memrl.text.tool_calls import MAX_ARG_DEPTH, parse_hermes

    def call(depth: int) -> str:
        value = "[" * (depth - 1) + "]" * (depth - 1)
        return f'<tool_call>{{"name": "f", "arguments": {{"a": {value}}}}}</tool_call>'

    ok = parse_hermes(call(MAX_ARG_DEPTH))
    assert len(ok.calls) == 1 and not ok.errors
    Message("assistant", None, ok.calls).to_dict()
    refused = parse_hermes(call(500))
    assert not refused.calls and f"more than {MAX_ARG_DEPTH} levels" in refused.errors[0]
