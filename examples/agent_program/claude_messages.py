"""The calculator agent written with the ``anthropic`` SDK (the Messages API), trained through memrl's gateway.

The episode's base URL and key serve the Messages API too: the anthropic client is built
from the openai client memrl passes (its ``base_url`` and ``api_key``).
"""

import anthropic

TOOLS = [{"name": "add", "description": "a + b", "input_schema": {
    "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}}]


def add(args: dict) -> str:
    try:
        return str(args["a"] + args["b"])
    except Exception as exc:  # a bad call is answered with the error, as a tool server would
        return f"error: {exc!r}"


async def solve(client, sample: dict) -> float:
    claude = anthropic.AsyncAnthropic(base_url=str(client.base_url), api_key=client.api_key)
    messages = [{"role": "user", "content": sample["question"]}]
    for _ in range(3):
        r = await claude.messages.create(model=client.model_name, max_tokens=128, system="Use the add tool.",
                                         messages=messages, tools=TOOLS)
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r.content]})
        calls = [b for b in r.content if b.type == "tool_use"]
        if not calls:
            break
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": add(b.input)} for b in calls]})
    text = "".join(b.text for b in r.content if b.type == "text")
    return float(str(sample["answer"]) in text)
