"""Chat usage per episode and role: what an evaluation against a paid API spent."""

from __future__ import annotations

import asyncio

from memrl.engines.openai_chat import ChatReply, parse_chat_reply
from memrl.engines.usage import count, metering, usage_line, usage_metrics, usage_totals


def reply(prompt: int | None, completion: int | None, cached: int | None = None) -> ChatReply:
    return ChatReply("ok", prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached)


def test_usage_and_cached_tokens_are_read_from_the_body():
    body = {"choices": [{"message": {"content": "hi"}}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 8}}}
    r = parse_chat_reply(body)
    assert (r.prompt_tokens, r.completion_tokens, r.cached_tokens) == (12, 3, 8)
    r = parse_chat_reply({"choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": 5}})
    assert (r.prompt_tokens, r.completion_tokens, r.cached_tokens) == (5, None, None)


def test_concurrent_episodes_each_count_their_own_replies_and_those_of_tasks_they_start():
    async def episode(k: int) -> dict:
        with metering() as meter:
            count("agent", reply(100 * k, k))
            await asyncio.sleep(0)  # the other episode runs here
            await asyncio.gather(*(asyncio.create_task(_judge(k)) for _ in range(2)))
            count("user", reply(None, None))
        return usage_metrics(meter)

    async def _judge(k: int) -> None:
        await asyncio.sleep(0)
        count("judge", reply(10, 1, cached=k))

    async def main() -> list[dict]:
        return await asyncio.gather(episode(1), episode(2))

    one, two = asyncio.run(main())
    assert one == {"agent_requests": 1, "agent_prompt_tokens": 100, "agent_cached_tokens": 0,
                   "agent_completion_tokens": 1, "agent_unreported": 0,
                   "judge_requests": 2, "judge_prompt_tokens": 20, "judge_cached_tokens": 2,
                   "judge_completion_tokens": 2, "judge_unreported": 0,
                   "user_requests": 1, "user_prompt_tokens": 0, "user_cached_tokens": 0,
                   "user_completion_tokens": 0, "user_unreported": 1}
    assert two["agent_prompt_tokens"] == 200 and two["judge_cached_tokens"] == 4
    count("agent", reply(1, 1))  # outside any episode: not counted, no error
    totals = usage_totals([one, two, {"turns": 3.0}])
    assert list(totals) == ["agent", "user", "judge"]
    assert totals["agent"] == {"requests": 2, "prompt_tokens": 300, "cached_tokens": 0, "completion_tokens": 3,
                               "unreported": 0}
    assert usage_totals([{"turns": 1.0, "user_turns": 2.0}]) == {}


def test_the_usage_line_is_short_numbers():
    line = usage_line({"agent": {"requests": 120, "prompt_tokens": 1_234_567, "cached_tokens": 300_000,
                                 "completion_tokens": 34_000, "unreported": 0},
                       "user": {"requests": 3, "prompt_tokens": 950, "cached_tokens": 0, "completion_tokens": 12,
                                "unreported": 1}})
    assert line == ("agent 120 requests, 1.2M prompt (300k cached) + 34k completion tokens; "
                    "user 3 requests, 950 prompt + 12 completion tokens, 1 without usage")


def test_cost_is_litellms_price_of_the_tokens_with_cached_ones_at_the_cache_price(monkeypatch):
    import sys
    import types

    from memrl.engines.usage import usage_cost

    seen = {}

    def cost_per_token(**kw):
        seen.update(kw)
        return 0.25, 0.5

    fake = types.SimpleNamespace(model_cost={"gpt-x": {}}, cost_per_token=cost_per_token)
    monkeypatch.setitem(sys.modules, "litellm", fake)
    monkeypatch.delenv("LITELLM_LOCAL_MODEL_COST_MAP", raising=False)
    usage = {"requests": 3, "prompt_tokens": 1500, "cached_tokens": 1024, "completion_tokens": 70, "unreported": 0}
    assert usage_cost("gpt-x", usage) == 0.75
    assert seen == {"model": "gpt-x", "prompt_tokens": 1500, "completion_tokens": 70, "cache_read_input_tokens": 1024}
    import os

    assert os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"  # LiteLLM's own table: nothing fetched
    assert usage_cost("Qwen/Qwen2.5-7B-Instruct", usage) is None  # not priced under exactly that name
    assert usage_cost(None, usage) is None and usage_cost("gpt-x", None) is None
    monkeypatch.setitem(sys.modules, "litellm", None)  # not installed
    assert usage_cost("gpt-x", usage) is None


def test_cost_equals_what_tau2_bench_charges_per_response():
    """τ²-bench prices each response with LiteLLM's completion_cost; memrl prices the summed tokens."""
    import os

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm = __import__("pytest").importorskip("litellm", reason="LiteLLM is not installed (τ²-bench brings it)")
    from memrl.engines.usage import usage_cost

    model, replies = "gpt-4.1-2025-04-14", [(1500, 70, 1024), (2100, 35, 1536), (800, 12, 0)]
    theirs = sum(litellm.completion_cost(completion_response=litellm.ModelResponse(
        model=model, choices=[{"message": {"role": "assistant", "content": "x"}}],
        usage={"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
               "prompt_tokens_details": {"cached_tokens": k}})) for p, c, k in replies)
    usage = {"prompt_tokens": 4400, "completion_tokens": 117, "cached_tokens": 2560}
    assert abs(usage_cost(model, usage) - theirs) < 1e-12 and theirs > 0
