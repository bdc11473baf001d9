"""A two-tool agent (add, multiply) with the plain openai SDK: the usual tool-calling loop.

The model's tool calls come back as ``message.tool_calls`` (memrl parses them from its text
with ``workflow.options.tool_parser``); results go back as ``tool`` messages.
"""

import json
import os

MODEL = os.environ.get("MEMRL_MODEL", "gpt-4o-mini")


def tool(name: str, doc: str) -> dict:
    numbers = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
               "required": ["a", "b"]}
    return {"type": "function", "function": {"name": name, "description": doc, "parameters": numbers}}


TOOLS = [tool("add", "a + b"), tool("multiply", "a * b")]
FUNCTIONS = {"add": lambda a, b: a + b, "multiply": lambda a, b: a * b}


def run_tool(call) -> str:
    try:
        args = json.loads(call.function.arguments)
        return str(FUNCTIONS[call.function.name](args["a"], args["b"]))
    except Exception as exc:  # a bad call is answered with the error, as a tool server would
        return f"error: {exc!r}"


async def calculator(client, sample: dict) -> float:
    messages = [{"role": "system", "content": "Use the tools, then give the final number."},
                {"role": "user", "content": sample["question"]}]
    for _ in range(4):
        r = await client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, max_tokens=128)
        message = r.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": run_tool(call)})
    return float(str(sample["answer"]) in (message.content or ""))
