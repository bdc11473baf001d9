"""An agent program's tool-call arguments that json cannot read without blowing the stack: a 400 for that call."""

from __future__ import annotations

import pytest

from memrl.gateway.requests import chat_messages
from memrl.serve.errors import APIError


@pytest.mark.parametrize("arguments", ['{"a":' * 100_000, '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}",
                                       '{"a": ' + "1" * 5000 + "}"])
def test_unreadable_arguments_are_a_400_naming_the_field(arguments):
    raw = [{"role": "user", "content": "hi"},
           {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                                 "function": {"name": "f", "arguments": arguments}}]}]
    with pytest.raises(APIError) as err:
        chat_messages(raw)
    assert err.value.status == 400
    assert "messages[1].tool_calls[0].function.arguments" in str(err.value.param or err.value)
