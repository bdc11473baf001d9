"""Helpers shared by workflows: stop tokens, truncation, answer scoring."""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from memrl.data.longctx import LongContextSample
from memrl.engines.base import GenerationResult, SamplingParams
from memrl.rewards.published import extract_answer
from memrl.rewards.qa import QAScores, score_answer
from memrl.types import Conversation, Trajectory

_STOP_STRINGS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "</s>")


def stop_token_ids(tokenizer: Any) -> tuple[int, ...]:
    """EOS plus the usual end-of-turn specials present in this tokenizer's vocabulary."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    vocab = tokenizer.get_vocab()
    ids.update(int(vocab[s]) for s in _STOP_STRINGS if s in vocab)
    return tuple(sorted(ids))


def turn_seed(params: SamplingParams, turn: int) -> SamplingParams:
    """A seeded episode gives each turn its own seed, so turns do not replay one random stream."""
    return params if params.seed is None else params.with_(seed=params.seed * 1009 + turn)


def strip_stop(ids: Sequence[int], stops: Sequence[int]) -> list[int]:
    """Generated ids without a trailing stop token (what is carried forward as text)."""
    out = list(ids)
    if out and out[-1] in stops:
        out.pop()
    return out


def centre_truncate(ids: Sequence[int], limit: int | None) -> list[int]:
    """Keep the first and last halves when longer than ``limit`` (MemAgent/verl 'center')."""
    ids = list(ids)
    if limit is None or len(ids) <= limit:
        return ids
    head = limit // 2
    return ids[:head] + ids[len(ids) - (limit - head):]


def score_text(text: str, golds: Sequence[str], reward: str,
               answer_format: str = "boxed") -> tuple[str | None, QAScores, float]:
    """Extract the answer (``workflow.answer_format``), score it, and pick the configured reward.

    The reward is a built-in (``em``, ``sub_em``, ``f1``, ``memagent_strict``: MemAgent's own
    training reward on the raw text) or a plug-in by import path; see :mod:`memrl.plugins`.
    """
    from memrl.plugins import reward_value

    answer = extract_answer(text, answer_format)
    return answer, score_answer(answer, golds), reward_value(reward, text, golds, answer)


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens, for arbitrarily long text.

    Goes straight to the Rust tokenizer when there is one: faster, and no
    "sequence longer than model_max_length" warning for a 1M-token document
    that will be read in chunks anyway.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return list(backend.encode(text, add_special_tokens=False).ids)
    return list(tokenizer.encode(text, add_special_tokens=False))


def decode(tokenizer: Any, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=True)


def qa_trajectory(
    sample: LongContextSample,
    tokenizer: Any,
    conversations: list[Conversation],
    final: GenerationResult,
    stops: Sequence[int],
    reward_key: str,
    *,
    sample_id: str | None,
    group_id: str | None,
    metrics: dict[str, float],
    info: dict[str, Any],
    answer_format: str = "boxed",
) -> Trajectory:
    """Score the final turn's answer (``answer_format``) and assemble the episode."""
    final_text = decode(tokenizer, strip_stop(final.token_ids, stops))
    answer, scores, reward = score_text(final_text, sample.answers, reward_key, answer_format)
    return Trajectory(
        conversations=conversations,
        reward=reward,
        sample_id=sample_id if sample_id is not None else str(sample.index),
        group_id=group_id if group_id is not None else str(sample.index),
        metrics={
            "em": scores.em, "sub_em": scores.sub_em, "f1": scores.f1,
            "answered": float(answer is not None),
            "num_conversations": float(len(conversations)),
            "final_truncated": float(final.finish_reason == "length"),
            "response_tokens": float(sum(c.num_generated for c in conversations)),
            **metrics,
        },
        info={"question": sample.question, "answers": list(sample.answers), "answer": answer,
              "final_text": final_text, **info},
    )


def read_inputs(sample: LongContextSample, tokenizer: Any, config: Any) -> tuple[list[int], int, list[int]]:
    """(context ids after ``max_chunks`` centre truncation, original context length, question ids)."""
    context = encode_text(tokenizer, sample.context)
    original_len = len(context)
    if config.max_chunks is not None:
        context = centre_truncate(context, config.max_chunks * config.chunk_tokens)
    return context, original_len, encode_text(tokenizer, sample.question)[: config.question_tokens]


P = TypeVar("P")
_PROMPT_CACHE: dict[tuple[Any, int, tuple[tuple[str, str], ...]], Any] = {}


def cached_prompts(build: Callable[[Any, dict[str, str]], P], tokenizer: Any, prompts_file: str | None,
                   defaults: Mapping[str, str]) -> P:
    """Token templates built once per (builder, tokenizer, template texts): an edited prompt file takes effect."""
    from memrl.workflows.templates import load_prompts

    texts = load_prompts(prompts_file, defaults)
    key = (build, id(tokenizer), tuple(sorted(texts.items())))
    if key not in _PROMPT_CACHE:
        _PROMPT_CACHE[key] = build(tokenizer, texts)
    return _PROMPT_CACHE[key]
