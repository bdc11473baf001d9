"""The calculator agent written with the OpenAI Agents SDK (``Agent`` + ``Runner.run``), which speaks Responses.

The agent's model is an ``OpenAIResponsesModel`` on an ``AsyncOpenAI`` client built from the
episode's base URL and key. Tracing is off: it would send each run to OpenAI.
"""

from agents import Agent, OpenAIResponsesModel, RunConfig, Runner, function_tool
from openai import AsyncOpenAI


@function_tool
def add(a: float, b: float) -> float:
    """a + b"""
    return a + b


async def solve(client, sample: dict) -> float:
    async with AsyncOpenAI(base_url=str(client.base_url), api_key=client.api_key) as oai:
        agent = Agent(name="calculator", instructions="Use the add tool, then give the final number.", tools=[add],
                      model=OpenAIResponsesModel(client.model_name, openai_client=oai))
        result = await Runner.run(agent, sample["question"], max_turns=4, run_config=RunConfig(tracing_disabled=True))
    return float(str(sample["answer"]) in str(result.final_output))
