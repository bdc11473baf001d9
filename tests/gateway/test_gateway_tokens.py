"""What the gateway records is exact: the template's prompt ids, the sampled ids and their log-probs."""

from __future__ import annotations

import asyncio

import pytest
import torch

from memrl.engines.base import SamplingParams
from memrl.engines.hf import HFEngine
from memrl.testing.scripted import ScriptedEngine
from memrl.train.batch import collate, rows_from_trajectories, token_logprobs
from tests.gateway.conftest import open_episode

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"key": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def model32():
    from memrl.models.resolve import load_model

    torch.manual_seed(0)
    return load_model("tiny", device="cpu", dtype="float32").eval()


def test_prompt_ids_are_the_chat_template_ids_and_logprobs_match_the_trainer(gateway, model32, tools_tokenizer):
    tok = tools_tokenizer
    messages = [{"role": "system", "content": "You answer briefly."},
                {"role": "user", "content": "What is the key?"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c0", "type": "function", "function": {
                    "name": "lookup", "arguments": '{"key": "k"}'}}]},
                {"role": "tool", "tool_call_id": "c0", "content": "42"}]
    temperature = 0.8

    async def go():
        engine = HFEngine(model32)
        sampling = SamplingParams(temperature=temperature, seed=5)
        async with open_episode(gateway, engine, tok, sampling=sampling) as (ep, _, client):
            r = await client.chat.completions.create(model="m", messages=messages, tools=TOOLS, max_tokens=12,
                                                     logprobs=True, extra_body={"return_token_ids": True})
            r2 = await client.completions.create(model="m", prompt="Memory: the key is", max_tokens=6, logprobs=0)
        await engine.close()
        return ep, r, r2

    ep, r, r2 = asyncio.run(go())
    # The SDK sends arguments as a JSON string; a Hugging Face template is given the object, as vLLM does.
    as_template = [dict(m) for m in messages]
    as_template[2] = {"role": "assistant", "tool_calls": [{"id": "c0", "type": "function", "function": {
        "name": "lookup", "arguments": {"key": "k"}}}]}
    # ... and the tools as vLLM dumps its pydantic model of them: a description not sent is null
    as_vllm = [{"type": "function", "function": {"name": "lookup", "description": None,
                                                 "parameters": TOOLS[0]["function"]["parameters"]}}]
    expected = tok.apply_chat_template(as_template, tools=as_vllm, add_generation_prompt=True, tokenize=True)
    expected = list(expected["input_ids"] if hasattr(expected, "keys") else expected)
    first, second = ep.conversations
    assert first.token_ids[:first.prompt_length] == expected == r.choices[0].model_extra["prompt_token_ids"]
    assert '"lookup"' in tok.decode(expected) and '{"key": "k"}' in tok.decode(expected)
    assert first.generated_ids() == r.choices[0].model_extra["token_ids"]
    assert second.token_ids[:second.prompt_length] == tok.encode("Memory: the key is", add_special_tokens=False)
    sent = [t.logprob for t in r.choices[0].logprobs.content]
    assert sent == pytest.approx([lp for lp, m in zip(first.logprobs, first.loss_mask) if m], abs=0)
    assert r2.choices[0].logprobs.token_logprobs == pytest.approx(list(second.logprobs)[second.prompt_length:], abs=0)

    rows = rows_from_trajectories([ep.trajectory() if ep.rewarded else _rewarded(ep)])
    batch = collate(rows, pad_id=tok.pad_token_id or 0, device=torch.device("cpu"))
    with torch.no_grad():
        trainer, _ = token_logprobs(model32, batch, temperature)
    for i, row in enumerate(rows):
        recorded = torch.tensor(row.engine_logprobs[1:])
        mask = torch.tensor(row.loss_mask[1:], dtype=torch.bool)
        assert mask.sum() > 0
        diff = (trainer[i, : len(row) - 1][mask] - recorded[mask]).abs().max().item()
        assert diff < 1e-4, f"conversation {i}: recorded log-probs differ from the trainer's by {diff:.2e}"


def _rewarded(ep):
    ep.reward(0.0)
    return ep.trajectory()


def test_merge_rule_on_a_hand_made_sequence(gateway, tools_tokenizer):
    """A call extending the last conversation's prompt + answer exactly merges; anything else starts a new one."""
    tok = tools_tokenizer
    reply = tok.encode(" ok", add_special_tokens=False)

    async def go(merge: bool):
        engine = ScriptedEngine(lambda prompt, params: reply + [tok.eos_token_id])
        async with open_episode(gateway, engine, tok, merge=merge) as (ep, _, client):
            p1 = tok.encode("Document one.", add_special_tokens=False)
            a1 = (await client.completions.create(model="m", prompt=p1, max_tokens=8,
                                                  extra_body={"return_token_ids": True})).choices[0]
            full1 = p1 + a1.model_extra["token_ids"]  # the answer as sampled, stop token included
            p2 = full1 + tok.encode(" Next.", add_special_tokens=False)
            await client.completions.create(model="m", prompt=p2, max_tokens=8)  # extends: merged
            p3 = tok.encode("Summary of it.", add_special_tokens=False)
            await client.completions.create(model="m", prompt=p3, max_tokens=8)  # a fresh prompt: new
            p4 = p2 + reply + [tok.eos_token_id]  # extends an earlier conversation, not the last one: new
            await client.completions.create(model="m", prompt=p4, max_tokens=8)
            return ep, p1, p2, p3, p4

    ep, p1, p2, p3, p4 = asyncio.run(go(True))
    assert [c.num_tokens for c in ep.conversations] == [len(p2) + 3, len(p3) + 3, len(p4) + 3]
    merged = ep.conversations[0]
    eos = tok.eos_token_id
    assert merged.token_ids == p2 + reply + [eos]
    assert merged.loss_mask == [0] * len(p1) + [1] * 3 + [0] * (len(p2) - len(p1) - 3) + [1] * 3
    assert merged.logprobs == [0.0] * len(p1) + [-0.5] * 3 + [0.0] * (len(p2) - len(p1) - 3) + [-0.5] * 3
    ep, *_ = asyncio.run(go(False))
    assert len(ep.conversations) == 4


def test_a_stop_string_ends_the_call_in_the_engine_and_the_recorded_tokens_there(gateway, model32, tools_tokenizer):
    """A ReAct program's ``stop=["Observation:"]``: the engine stops at the token completing it (not at
    max_tokens), and the conversation keeps exactly the tokens the program's text came from."""
    tok = tools_tokenizer
    sampling = SamplingParams(temperature=1.0, seed=3)

    async def call(stop):
        engine = HFEngine(model32, tokenizer=tok)
        async with open_episode(gateway, engine, tok, sampling=sampling) as (ep, _, client):
            r = await client.completions.create(model="m", prompt="Thought:", max_tokens=40, stop=stop,
                                                extra_body={"ignore_eos": True})
        await engine.close()
        return ep.conversations[0], r.choices[0], engine.stats.generated_tokens

    full, choice, _ = asyncio.run(call(None))
    text = choice.text
    stop = next(text[i:i + 2] for i in range(len(text) // 2, len(text) - 1) if text[i:i + 2].strip())
    conv, cut, decoded = asyncio.run(call([stop]))
    kept = conv.generated_ids()
    assert cut.finish_reason == "stop" and cut.text == text[:text.find(stop)]
    assert kept == full.generated_ids()[:len(kept)] and decoded == len(kept) < 40
    assert stop in tok.decode(kept) and stop not in tok.decode(kept[:-1])
