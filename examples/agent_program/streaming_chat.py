"""A plain openai-SDK program that streams (``stream=True``), as many frameworks do by default.

A streamed call is generated and recorded whole, then sent as chunks: training sees the
same tokens as for the same call unstreamed.
"""


async def ask(client, messages: list) -> str:
    stream = await client.chat.completions.create(model=client.model_name, messages=messages, max_tokens=128,
                                                  stream=True, stream_options={"include_usage": True})
    return "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])


async def solve(client, sample: dict) -> float:
    messages = [{"role": "user", "content": sample["question"]}]
    draft = await ask(client, messages)
    messages += [{"role": "assistant", "content": draft}, {"role": "user", "content": "Check it; give the number."}]
    answer = await ask(client, messages)
    return float(str(sample["answer"]) in answer)
