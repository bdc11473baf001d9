"""MemAgent: read a document in fixed-size chunks, overwrite a fixed-size memory.

One episode = ceil(context_tokens / chunk_tokens) memory conversations plus one
final conversation. Memory turn k sees (question, memory_{k-1}, chunk_k) and
its whole response (minus the stop token) becomes memory_k; the first turn sees
a fixed "no memory yet" text. The final turn sees only the question and the
last memory and must answer in ``\\boxed{}``. Every conversation is an
independent context of bounded size, so cost is linear in document length and
memory use does not grow with it.

``workflow.slot_fill`` says how the slots are filled. ``ids`` (default, and what
MemAgent's training does) splices token ids: the memory enters the next prompt
exactly as sampled. ``text`` does what MemAgent's evaluation client
(``taskutils/memory_eval``, ``--api recurrent``) and an OpenAI-compatible server
do together: the context and question are stripped, each chunk of context ids
is decoded to text (a cut through a multi-byte character becomes U+FFFD, as
there), the memory is the reply's text (after a ``</think>`` if there is one),
and the filled-in message is chat-templated and tokenized whole. Its prompt ids
are those the server builds from that client's messages.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from memrl.config.schema import WorkflowConfig
from memrl.data.longctx import LongContextSample
from memrl.engines.base import Engine, SamplingParams
from memrl.types import Conversation, Trajectory
from memrl.workflows.common import (
    ContextChunks,
    added_specials,
    anchor,
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
        self.no_memory_text = texts["no_memory"]
        self.stops = stop_token_ids(tokenizer)


class IdSlots:
    """``slot_fill=ids``: slots are token ids; the memory is the generated ids without the stop token."""

    def __init__(self, tokenizer: Any, prompts: MemAgentPrompts, config: WorkflowConfig) -> None:
        self.tokenizer, self.p, self.config = tokenizer, prompts, config

    def context(self, sample: LongContextSample) -> LongContextSample:
        return sample

    def question(self, sample: LongContextSample) -> Any:
        return encode_text(self.tokenizer, sample.question)[: self.config.question_tokens]

    def first_memory(self) -> Any:
        return self.p.no_memory

    def specials(self) -> tuple[list[int], list[int]]:
        return [], []

    def chunk(self, ids: list[int]) -> Any:
        return ids

    def memory(self, generated: list[int]) -> Any:
        return strip_stop(generated, self.p.stops)

    def render(self, template: TokenTemplate, **slots: Any) -> list[int]:
        return template.render(**slots)

    def memory_text(self, memory: Any) -> str:
        return decode(self.tokenizer, memory)


class TextSlots(IdSlots):
    """``slot_fill=text``: slots are text and the prompt is tokenized whole (MemAgent's eval client)."""

    def context(self, sample: LongContextSample) -> LongContextSample:
        return StrippedContext(sample)

    def question(self, sample: LongContextSample) -> Any:
        text = sample.question.strip()
        ids = encode_text(self.tokenizer, text)
        cut = self.config.question_tokens
        return text if cut is None or len(ids) <= cut else self.tokenizer.decode(ids[:cut])

    def first_memory(self) -> Any:
        return self.p.no_memory_text

    def specials(self) -> tuple[list[int], list[int]]:
        return added_specials(self.tokenizer)  # the client's tokenizer.encode(context)

    def chunk(self, ids: list[int]) -> Any:
        return self.tokenizer.decode(ids)  # as the client: specials kept, a split character becomes U+FFFD

    def memory(self, generated: list[int]) -> Any:
        text = decode(self.tokenizer, strip_stop(generated, self.p.stops))  # the reply's message content
        return text.split("</think>")[-1].strip() if "</think>" in text else text

    def render(self, template: TokenTemplate, **slots: Any) -> list[int]:
        return template.render_text(**slots)

    def memory_text(self, memory: Any) -> str:
        return memory


class StrippedContext:
    """A sample whose context reads without leading/trailing whitespace (read whole or streamed)."""

    def __init__(self, sample: LongContextSample) -> None:
        self.sample = sample
        if getattr(sample, "context_pieces", None) is not None:
            self.context_pieces = self._pieces

    @property
    def context(self) -> str:
        return self.sample.context.strip()

    def _pieces(self) -> Iterator[str]:
        held, started = "", False
        for piece in self.sample.context_pieces():  # type: ignore[attr-defined]
            if not started:
                piece = piece.lstrip()
                started = bool(piece)
            body = piece.rstrip()
            if body:  # whitespace held back from earlier pieces was inside the text after all
                yield held + body
                held = ""
            held += piece[len(body):]


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
    slots = (TextSlots if config.slot_fill == "text" else IdSlots)(tokenizer, p, config)
    # chunk by chunk: a sample read lazily from disk is encoded as it is read (flat memory at millions of tokens)
    chunks = ContextChunks(slots.context(sample), tokenizer, config, slots.specials())
    question = slots.question(sample)

    memory = slots.first_memory()
    conversations: list[Conversation] = []
    memory_truncated = empty_memory = 0
    mem_params = sampling.with_(max_new_tokens=config.memory_tokens, stop_token_ids=p.stops)
    for k, chunk in enumerate(chunks):
        prompt = slots.render(p.memory, question=question, memory=memory, chunk=slots.chunk(chunk))
        res = await engine.generate(prompt, turn_seed(mem_params, k))
        conversations.append(Conversation.from_prompt_response(
            prompt, res.token_ids, res.logprobs, meta={"kind": "memory", "chunk": k, "finish": res.finish_reason,
                                                       "state": anchor(sample.question, k, slots.memory_text(memory))}))
        memory = slots.memory(res.token_ids)
        memory_truncated += res.finish_reason == "length"
        empty_memory += not memory

    prompt = slots.render(p.final, question=question, memory=memory)
    final_params = sampling.with_(max_new_tokens=config.final_tokens, stop_token_ids=p.stops)
    res = await engine.generate(prompt, turn_seed(final_params, len(conversations)))
    conversations.append(Conversation.from_prompt_response(
        prompt, res.token_ids, res.logprobs, meta={"kind": "final", "finish": res.finish_reason,
                                                   "state": anchor(sample.question, "final", slots.memory_text(memory))}))
    return qa_trajectory(
        sample, tokenizer, conversations, res, p.stops, config.reward, sample_id=sample_id, group_id=group_id,
        metrics={"context_tokens": float(chunks.kept), "context_tokens_original": float(chunks.original),
                 "memory_truncated": float(memory_truncated), "empty_memory": float(empty_memory)},
        info={"memory": slots.memory_text(memory)}, answer_format=config.answer_format,
    )
