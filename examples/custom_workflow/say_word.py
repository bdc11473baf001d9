"""A workflow and a reward of your own, loaded by import path (nothing in memrl is edited).

    PYTHONPATH=examples/custom_workflow memrl train examples/custom_workflow/config.yaml

``say_word`` is one conversation: the model is asked to say a word and is rewarded when it does.
It follows memrl's workflow protocol: an async function of (sample, engine, tokenizer, config,
*, sampling, sample_id, group_id) that returns a Trajectory. Token ids go to the engine and come
back with their sampling log-probs; the trainer needs nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memrl.plugins import reward_value
from memrl.types import Conversation, Trajectory
from memrl.workflows.common import decode, encode_text, stop_token_ids


async def say_word(sample: Any, engine: Any, tokenizer: Any, config: Any, *, sampling: Any,
                   sample_id: str | None = None, group_id: str | None = None) -> Trajectory:
    word = sample.answers[0]
    chat = [{"role": "user", "content": f"{sample.question} Say only the word {word}."}]
    prompt = encode_text(tokenizer, tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False))
    stops = stop_token_ids(tokenizer)
    res = await engine.generate(prompt, sampling.with_(max_new_tokens=config.final_tokens, stop_token_ids=stops))
    text = decode(tokenizer, res.token_ids)
    reward = reward_value(config.reward, text, sample.answers, text)  # the configured reward, yours included
    return Trajectory(
        conversations=[Conversation.from_prompt_response(prompt, res.token_ids, res.logprobs)],
        reward=reward, sample_id=sample_id or str(sample.index), group_id=group_id or str(sample.index),
        metrics={"response_tokens": float(len(res.token_ids)), "num_conversations": 1.0},
        info={"answer": text})


def mentions_word(text: str, golds: Sequence[str], answer: str | None) -> float:
    """A reward plug-in: 1 if any gold word appears in the response, case-insensitive."""
    low = text.lower()
    return float(any(g.lower() in low for g in golds))
