"""MemAgent: read a document in fixed-size chunks, overwrite a fixed-size memory.

One episode = ceil(context_tokens / chunk_tokens) memory conversations plus one
final conversation. Memory turn k sees (question, memory_{k-1}, chunk_k) and
its whole response (minus the stop token) becomes memory_k; the first turn sees
a fixed "no memory yet" text. The final turn sees only the question and the
last memory and must answer in ``\\boxed{}``. Every conversation is an
independent context of bounded size, so cost is linear in document length and
memory use does not grow with it.
"""

from __future__ import annotations

import math
from typing import Any

from memrl.config.schema import WorkflowConfig
from memrl.data.longctx import LongContextSample
from memrl.engines.base import Engine, SamplingParams
from memrl.types import Conversation, Trajectory
from memrl.workflows.common import (
    ContextChunks,
    cached_prompts,
    decode,
    encode_text,
    qa_trajectory,
    stop_token_ids,
    strip_stop,
    turn_seed,
)
from memrl.workflows.templates import TokenTemplate

DEFAULT_PROMPTS = {
    "memory": (
        "You are reading a long document one section at a time so that you can answer a question "
        "at the end. You keep a short memory of what matters.\n\n"
        "Question:\n{question}\n\n"
        "Memory so far:\n{memory}\n\n"
        "Next section of the document:\n{chunk}\n\n"
        "Write the updated memory: keep what still matters from the memory so far and add any facts "
        "from this section that help answer the question. Reply with the memory only."
    ),
    "final": (
        "You have read a long document and kept a memory of it. Answer the question from the memory.\n\n"
        "Question:\n{question}\n\n"
        "Memory:\n{memory}\n\n"
        "Reply with a short answer inside \\boxed{}, for example \\boxed{Paris}."
    ),
    "no_memory": "Nothing yet.",
}


class MemAgentPrompts:
    """Token templates for one tokenizer (built once, reused by every episode)."""

    def __init__(self, tokenizer: Any, texts: dict[str, str]) -> None:
        self.memory = TokenTemplate(texts["memory"], tokenizer)
        self.final = TokenTemplate(texts["final"], tokenizer)
        self.no_memory = tokenizer.encode(texts["no_memory"], add_special_tokens=False)
        self.stops = stop_token_ids(tokenizer)


def prompts_for(tokenizer: Any, config: WorkflowConfig) -> MemAgentPrompts:
    return cached_prompts(MemAgentPrompts, tokenizer, config.prompts, DEFAULT_PROMPTS)


def chunk_count(context_tokens: int, config: WorkflowConfig) -> int:
    """Memory turns for a context of this many tokens (after ``max_chunks`` truncation)."""
    if config.max_chunks is not None:
        context_tokens = min(context_tokens, config.max_chunks * config.chunk_tokens)
    return math.ceil(context_tokens / config.chunk_tokens)


async def memagent(
    sample: LongContextSample,
    engine: Engine,
    tokenizer: Any,
    config: WorkflowConfig,
    *,
    sampling: SamplingParams | None = None,
    sample_id: str | None = None,
    group_id: str | None = None,
) -> Trajectory:
    """Run one MemAgent episode and score its boxed answer."""
    sampling = sampling or SamplingParams(greedy=True)
    p = prompts_for(tokenizer, config)
    # chunk by chunk: a sample read lazily from disk is encoded as it is read (flat memory at millions of tokens)
    chunks = ContextChunks(sample, tokenizer, config)
    question = encode_text(tokenizer, sample.question)[: config.question_tokens]

    memory = p.no_memory
    conversations: list[Conversation] = []
    memory_truncated = empty_memory = 0
    mem_params = sampling.with_(max_new_tokens=config.memory_tokens, stop_token_ids=p.stops)
    for k, chunk in enumerate(chunks):
        prompt = p.memory.render(question=question, memory=memory, chunk=chunk)
        res = await engine.generate(prompt, turn_seed(mem_params, k))
        conversations.append(Conversation.from_prompt_response(
            prompt, res.token_ids, res.logprobs, meta={"kind": "memory", "chunk": k, "finish": res.finish_reason}))
        memory = strip_stop(res.token_ids, p.stops)
        memory_truncated += res.finish_reason == "length"
        empty_memory += not memory

    prompt = p.final.render(question=question, memory=memory)
    final_params = sampling.with_(max_new_tokens=config.final_tokens, stop_token_ids=p.stops)
    res = await engine.generate(prompt, turn_seed(final_params, len(conversations)))
    conversations.append(Conversation.from_prompt_response(
        prompt, res.token_ids, res.logprobs, meta={"kind": "final", "finish": res.finish_reason}))
    return qa_trajectory(
        sample, tokenizer, conversations, res, p.stops, config.reward, sample_id=sample_id, group_id=group_id,
        metrics={"context_tokens": float(chunks.kept), "context_tokens_original": float(chunks.original),
                 "memory_truncated": float(memory_truncated), "empty_memory": float(empty_memory)},
        info={"memory": decode(tokenizer, memory)}, answer_format=config.answer_format,
    )
