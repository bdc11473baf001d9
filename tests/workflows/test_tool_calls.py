"""Tool-call parsers."""

from __future__ import annotations

from memrl.workflows.tool_calls import FORMATS, get_parser, parse_hermes, parse_json


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
