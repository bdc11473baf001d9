"""A plain openai-SDK program that streams (``stream=True``), as many frameworks do by default.

Its client is built from the episode's base URL and key, as a program that makes its own
client does. A streamed call is generated and recorded whole, then sent as chunks:
training sees the same tokens as for the same call unstreamed.
"""

import openai


async def ask(oai: openai.AsyncOpenAI, model: str, messages: list) -> str:
    stream = await oai.chat.completions.create(model=model, messages=messages, max_tokens=128,
                                               stream=True, stream_options={"include_usage": True})
    return "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])


async def solve(client, sample: dict) -> float:
    async with openai.AsyncOpenAI(base_url=str(client.base_url), api_key=client.api_key) as oai:
        messages = [{"role": "user", "content": sample["question"]}]
        draft = await ask(oai, client.model_name, messages)
        messages += [{"role": "assistant", "content": draft}, {"role": "user", "content": "Check it; give the number."}]
        answer = await ask(oai, client.model_name, messages)
    return float(str(sample["answer"]) in answer)
