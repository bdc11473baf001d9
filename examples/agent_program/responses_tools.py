"""The calculator agent written with the OpenAI Responses API (``client.responses.create``).

Each turn continues the last one with ``previous_response_id``: the gateway keeps an
episode's responses for the episode, so only the new items (the tool results) are sent.
"""

import json

TOOLS = [{"type": "function", "name": "add", "description": "a + b", "parameters": {
    "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}}]


def add(arguments: str) -> str:
    try:
        args = json.loads(arguments)
        return str(args["a"] + args["b"])
    except Exception as exc:  # a bad call is answered with the error, as a tool server would
        return f"error: {exc!r}"


async def solve(client, sample: dict) -> float:
    r = await client.responses.create(model=client.model_name, instructions="Use the add tool.",
                                      input=sample["question"], tools=TOOLS, max_output_tokens=128)
    for _ in range(3):
        calls = [item for item in r.output if item.type == "function_call"]
        if not calls:
            break
        results = [{"type": "function_call_output", "call_id": c.call_id, "output": add(c.arguments)} for c in calls]
        r = await client.responses.create(model=client.model_name, previous_response_id=r.id, input=results,
                                          tools=TOOLS, max_output_tokens=128)
    return float(str(sample["answer"]) in r.output_text)
