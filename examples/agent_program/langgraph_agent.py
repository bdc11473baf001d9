"""The calculator agent written with LangGraph's prebuilt ReAct agent (``create_react_agent``).

The graph's model is a ``ChatOpenAI`` built from the episode's base URL and key; the graph
runs the tool loop itself (a failing or unknown tool call is answered with the error). A
policy that never stops calling tools ends at the recursion limit, with reward 0.
"""

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.errors import GraphRecursionError
from langgraph.prebuilt import create_react_agent


@tool
def add(a: float, b: float) -> float:
    """a + b"""
    return a + b


async def solve(client, sample: dict) -> float:
    llm = ChatOpenAI(base_url=str(client.base_url), api_key=client.api_key, model=client.model_name,
                     max_tokens=128)
    agent = create_react_agent(llm, [add], prompt="Use the add tool.")
    try:
        state = await agent.ainvoke({"messages": [("user", sample["question"])]}, {"recursion_limit": 8})
    except GraphRecursionError:
        return 0.0
    return float(str(sample["answer"]) in str(state["messages"][-1].content))
