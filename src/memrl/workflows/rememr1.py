"""ReMemR1: MemAgent plus look-back. Each memory turn may ask to recall an earlier memory.

A memory turn sees (question, current memory, recalled memory, chunk) and
answers with ``<think>...</think>``, exactly one ``<update>...</update>`` and
optionally ``<recall>query</recall>``. The memory carried forward is the whole
response with the recall section cut out (at token boundaries; no
re-tokenization). The query is matched with TF-IDF against the memories
written by *earlier* turns (not the one just written, which is already the
current memory; ReMemR1's training code does the same) and the best one fills
the recalled slot of the next prompt and of the final prompt.

Each conversation also gets ReMemR1's state reward (stored on
``Conversation.reward``): a format reward (memory turn: exactly one non-empty
update; final turn: exactly one ``\\boxed{}``) plus, on memory turns, the gain
in the fraction of gold-answer words present in the memory, plus the positive
part of the gain the recalled memory adds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from memrl.config.schema import WorkflowConfig
from memrl.data.longctx import LongContextSample
from memrl.engines.base import Engine, SamplingParams
from memrl.rewards.qa import normalize_answer
from memrl.types import Conversation, Trajectory
from memrl.workflows.common import (
    cached_prompts,
    decode,
    qa_trajectory,
    read_inputs,
    stop_token_ids,
    strip_stop,
    turn_seed,
)
from memrl.workflows.retrieval import TfidfIndex
from memrl.workflows.templates import TokenTemplate

DEFAULT_PROMPTS = {
    "memory": (
        "You are reading a long document section by section to answer a question. You keep a memory, "
        "and you may look back at one of your earlier memories.\n\n"
        "Question:\n{question}\n\n"
        "Current memory:\n{memory}\n\n"
        "Recalled earlier memory:\n{recalled}\n\n"
        "Next section of the document:\n{chunk}\n\n"
        "Think inside <think></think>. Then write the complete updated memory inside <update></update>. "
        "If an earlier memory may hold something you need, add <recall>a short search query</recall>."
    ),
    "final": (
        "You have read a long document and kept a memory of it. Answer the question.\n\n"
        "Question:\n{question}\n\n"
        "Memory:\n{memory}\n\n"
        "Recalled earlier memory:\n{recalled}\n\n"
        "Reply with a short answer inside \\boxed{}, for example \\boxed{Paris}."
    ),
    "no_memory": "Nothing yet.",
    "no_recall": "Nothing recalled.",
}

_UPDATE = re.compile(r"<update>(.*?)</update>", re.S)
_RECALL = re.compile(r"<recall>(.*?)</recall>", re.S)
_BOXED = re.compile(r"\\boxed\s*\{")
_TAG = re.compile(r"</?\w+>")


def cut_span(tokenizer: Any, ids: Sequence[int], start: int, end: int) -> list[int]:
    """Drop the tokens covering characters [start, end) of ``decode(ids)``.

    Token boundaries are found by decoding prefixes (binary search), so the
    kept tokens are the sampled ones, never a re-encoding.
    """
    ids = list(ids)

    def prefix_len(i: int) -> int:
        return len(tokenizer.decode(ids[:i], skip_special_tokens=False))

    lo, hi = 0, len(ids)  # a = last i with prefix_len(i) <= start
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if prefix_len(mid) <= start:
            lo = mid
        else:
            hi = mid - 1
    a = lo
    lo, hi = a, len(ids)  # b = first i with prefix_len(i) >= end
    while lo < hi:
        mid = (lo + hi) // 2
        if prefix_len(mid) >= end:
            hi = mid
        else:
            lo = mid + 1
    return ids[:a] + ids[lo:]


def gold_coverage(text: str, golds: Sequence[str]) -> float:
    """Fraction of a gold answer's (normalised) words present in ``text``; max over golds.

    Tags become spaces first, or normalisation would glue ``<update>Paris`` into one word.
    """
    have = set(normalize_answer(_TAG.sub(" ", text)).split())
    best = 0.0
    for g in golds:
        need = set(normalize_answer(g).split())
        if need:
            best = max(best, len(need & have) / len(need))
    return best


class _Prompts:
    def __init__(self, tokenizer: Any, texts: dict[str, str]) -> None:
        self.memory = TokenTemplate(texts["memory"], tokenizer)
        self.final = TokenTemplate(texts["final"], tokenizer)
        self.no_memory = tokenizer.encode(texts["no_memory"], add_special_tokens=False)
        self.no_recall = tokenizer.encode(texts["no_recall"], add_special_tokens=False)
        self.stops = stop_token_ids(tokenizer)


async def rememr1(
    sample: LongContextSample,
    engine: Engine,
    tokenizer: Any,
    config: WorkflowConfig,
    *,
    sampling: SamplingParams | None = None,
    sample_id: str | None = None,
    group_id: str | None = None,
) -> Trajectory:
    """Run one ReMemR1 episode: memory turns with recall, then the final answer."""
    sampling = sampling or SamplingParams(greedy=True)
    p = cached_prompts(_Prompts, tokenizer, config.prompts, DEFAULT_PROMPTS)
    context, original_len, question = read_inputs(sample, tokenizer, config)

    memory, memory_text, recalled, recalled_text = p.no_memory, "", p.no_recall, ""
    index = TfidfIndex()
    stored: list[list[int]] = []
    conversations: list[Conversation] = []
    counts = {"no_update": 0, "multiple_update": 0, "recalls": 0, "recall_hits": 0, "memory_truncated": 0}
    params = sampling.with_(max_new_tokens=config.memory_tokens, stop_token_ids=p.stops)
    for k in range(math.ceil(len(context) / config.chunk_tokens)):
        chunk = context[k * config.chunk_tokens: (k + 1) * config.chunk_tokens]
        prompt = p.memory.render(question=question, memory=memory, recalled=recalled, chunk=chunk)
        res = await engine.generate(prompt, turn_seed(params, k))
        out = strip_stop(res.token_ids, p.stops)
        text = tokenizer.decode(out, skip_special_tokens=False)
        updates = _UPDATE.findall(text)
        recall_m = list(_RECALL.finditer(text))
        counts["memory_truncated"] += res.finish_reason == "length"
        counts["no_update"] += not updates
        counts["multiple_update"] += len(updates) > 1
        well_formed = len(updates) == 1 and bool(updates[0].strip())

        new_memory = out
        for m in reversed(recall_m):  # cut every recall section, last first so offsets stay valid
            new_memory = cut_span(tokenizer, new_memory, m.start(), m.end())
        new_text = decode(tokenizer, new_memory)

        hit_text = ""
        if recall_m:
            counts["recalls"] += 1
            hit = index.top1(recall_m[-1].group(1))
            if hit is not None:
                counts["recall_hits"] += 1
                recalled, recalled_text = stored[hit[0]], decode(tokenizer, stored[hit[0]])
                hit_text = recalled_text
        gain = gold_coverage(new_text, sample.answers) - gold_coverage(memory_text, sample.answers)
        recall_gain = gold_coverage(new_text + " " + hit_text, sample.answers) - gold_coverage(new_text, sample.answers)
        conversations.append(Conversation.from_prompt_response(
            prompt, res.token_ids, res.logprobs, reward=float(well_formed) + gain + max(0.0, recall_gain),
            meta={"kind": "memory", "chunk": k, "finish": res.finish_reason, "recall": bool(recall_m)}))
        index.add(new_text)
        stored.append(new_memory)
        memory, memory_text = new_memory, new_text

    slot = recalled if config.recall_in_final else p.no_recall
    prompt = p.final.render(question=question, memory=memory, recalled=slot)
    final_params = sampling.with_(max_new_tokens=config.final_tokens, stop_token_ids=p.stops)
    res = await engine.generate(prompt, turn_seed(final_params, len(conversations)))
    final_text = decode(tokenizer, strip_stop(res.token_ids, p.stops))
    conversations.append(Conversation.from_prompt_response(
        prompt, res.token_ids, res.logprobs, reward=float(len(_BOXED.findall(final_text)) == 1),
        meta={"kind": "final", "finish": res.finish_reason}))
    return qa_trajectory(
        sample, tokenizer, conversations, res, p.stops, config.reward, sample_id=sample_id, group_id=group_id,
        metrics={"context_tokens": float(len(context)), "context_tokens_original": float(original_len),
                 **{k: float(v) for k, v in counts.items()}},
        info={"memory": memory_text, "recalled": recalled_text},
    )
