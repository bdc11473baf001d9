"""The calculator agent written with LangChain: ``ChatOpenAI`` with the ``add`` tool bound (``bind_tools``).

The chat model is built from the episode's base URL and key (any OpenAI-compatible
endpoint works the same way); the loop is LangChain's usual one: each tool call the model
returns is run and answered with a ``ToolMessage``, then the model is called again.
"""

from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI


@tool
def add(a: float, b: float) -> float:
    """a + b"""
    return a + b


def run_tool(call: dict) -> ToolMessage:
    try:
        return add.invoke(call)  # a ToolCall in, its ToolMessage out
    except Exception as exc:  # a bad call is answered with the error, as a tool server would
        return ToolMessage(f"error: {exc!r}", tool_call_id=call["id"])


async def solve(client, sample: dict) -> float:
    llm = ChatOpenAI(base_url=str(client.base_url), api_key=client.api_key, model=client.model_name,
                     max_tokens=128).bind_tools([add])
    messages = [SystemMessage("Use the add tool."), HumanMessage(sample["question"])]
    for _ in range(3):
        reply = await llm.ainvoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            break
        messages += [run_tool(call) for call in reply.tool_calls]
    return float(str(sample["answer"]) in str(reply.content))
