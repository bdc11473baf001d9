"""Agent programs the gateway tests run: each is what a user would write with the plain openai SDK."""

from __future__ import annotations

import asyncio


async def two_calls(client, sample):
    """Two calls, the second not a prefix-extension of the first (a summary, then an answer)."""
    first = await client.chat.completions.create(model=client.model_name, max_tokens=6, messages=[
        {"role": "user", "content": f"Summarise: {sample['doc']}"}])
    summary = first.choices[0].message.content
    await client.chat.completions.create(model=client.model_name, max_tokens=6, messages=[
        {"role": "system", "content": "Answer from the notes."}, {"role": "user", "content": f"Notes: {summary}"}])
    return {"reward": float(sample["gold"] == "yes"), "metrics": {"summary_chars": len(summary)}}


async def raises(client, sample):
    await client.completions.create(model="m", prompt="hello", max_tokens=2)
    raise KeyError("no such field")


async def never_calls(client, sample):
    return 1.0


async def loops(client, sample):
    for _ in range(10_000):
        await client.completions.create(model="m", prompt="again", max_tokens=1)
    return 1.0


async def loops_quietly(client, sample):
    """Swallows the refusal past the call cap and returns a reward anyway."""
    try:
        await loops(client, sample)
    except Exception:  # noqa: BLE001
        pass
    return 1.0


async def hangs(client, sample):
    await client.completions.create(model="m", prompt="wait", max_tokens=1)
    await asyncio.sleep(3600)


async def says_yes(client, sample):
    await client.completions.create(model="m", prompt="hi", max_tokens=1)
    return "yes"


async def numpy_reward(client, sample):
    """Scores with numpy, as many reward functions do: an np.float32 is a number."""
    import numpy as np

    await client.completions.create(model="m", prompt="hi", max_tokens=1)
    return {"reward": np.float32(0.25), "metrics": {"hits": np.int64(3)}}


async def nan_reward(client, sample):
    await client.completions.create(model="m", prompt="hi", max_tokens=1)
    return float("nan")


async def nan_metric(client, sample):
    await client.completions.create(model="m", prompt="hi", max_tokens=1)
    return {"reward": 1.0, "metrics": {"f1": float("inf")}}


def not_async(client, sample):
    return 1.0


async def reads_question(client, sample):
    """Rewarded when the sample arrives as a plain dict (memrl eval's long-context samples are dataclasses)."""
    await client.completions.create(model="m", prompt=sample["question"], max_tokens=1)
    return float(isinstance(sample, dict) and sample["answers"] == ["Paris"])


async def sync_client(client, sample):
    """Blocks its event loop with the synchronous SDK (a common way to write an agent): must not deadlock."""
    import openai

    sync = openai.OpenAI(base_url=str(client.base_url), api_key=client.api_key, max_retries=0)
    r = sync.chat.completions.create(model="m", max_tokens=4, messages=[{"role": "user", "content": sample["doc"]}])
    return float(r.choices[0].message.content == " fine")
