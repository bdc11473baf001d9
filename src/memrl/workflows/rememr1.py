"""ReMemR1: MemAgent plus look-back. Each memory turn may ask to recall an earlier memory.

A memory turn sees (question, current memory, recalled memory, chunk) and
answers with a thinking section, exactly one ``<update>...</update>`` and
optionally ``<recall>query</recall>``. The memory carried forward is the whole
response with the recall sections cut out. The query is matched with TF-IDF
against the memories of *earlier* turns (``workflow.recall_pool=previous``, as
ReMemR1's training code does) or against those plus the one just written
(``including_current``, as its eval code does). The recalled-memory slot of the
next prompt is rewritten every turn: the hit, or the "nothing recalled"
placeholder when the turn made no query or found nothing. The final prompt shows
the slot left by the last memory turn (``recall_in_final``).

Each conversation also gets a per-turn state reward (``Conversation.reward``;
mixed into the advantage with ``algorithm.step_rewards=true``). Two variants
(``workflow.rememr1_variant``):

``memrl`` (default; the cleaner reading of the paper)
    Prompts ask for ``<think>``. Recall: word TF-IDF over every earlier memory, a
    hit needs a shared word. Memory = sampled tokens with the recall sections cut
    at token boundaries (no re-tokenization). State reward = format (memory
    turn: exactly one non-empty update, across lines; final: exactly one
    ``\\boxed{``) + the gain in gold-answer coverage (SQuAD-normalised words,
    max over golds) of the whole new memory over the previous one + the positive
    part of the coverage the recalled memory adds to the new memory.

``released`` (the public ReMemR1 code, bugs included)
    Prompts ask for ``<thinking>``, ``<update>``, ``<recall>`` and lay the
    inputs out in ``<problem>``, ``<recalled_memory>``, ``<memory>`` and
    ``<section>`` blocks. Recall: the first one-line ``<recall>(.+)</recall>``;
    TF-IDF over the model tokenizer's subword pieces of distinct memory texts,
    top-1 with no threshold (see :mod:`memrl.workflows.retrieval`). Memory = the
    decoded response without recall sections, stripped and re-encoded. State
    reward (:func:`released_state_reward`): format on one-line update sections
    (final: one non-empty one-line ``\\boxed{...}``); coverage is raw substring
    matching of each gold's whitespace words, averaged over golds; update term =
    coverage of the first one-line update minus that of the first one-line
    ``<memory>...</memory>`` in the prompt, which ReMemR1's own layout (a newline
    after ``<memory>``) never yields, so the previous memory always counts 0;
    recall term = max(0, coverage of this turn's recalled text, placeholder
    included, joined to the whole prompt, minus coverage of the prompt alone: what
    the recall adds, as since ReMemR1's commit 6d8401f); final turns get format only.
    ReMemR1's trainer sums its state reward tiled over two columns before
    centring, doubling the state advantage; the trainer applies that factor 2
    for this variant.
"""

from __future__ import annotations

import dataclasses
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
    added_specials,
    anchor,
    cached_prompts,
    decode,
    encode_text,
    qa_trajectory,
    read_inputs,
    stop_token_ids,
    strip_stop,
    turn_seed,
)
from memrl.workflows.retrieval import SubwordTfidfIndex, TfidfIndex
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

# The released variant keeps ReMemR1's tag names and block layout (its reward reads the <memory> block);
# the wording is memrl's.
RELEASED_PROMPTS = {
    "memory": (
        "Below are a question, one section of a long article, your memory of the sections before it, and "
        "possibly an earlier memory you asked to look at again. Reply in this form:\n"
        "- your reasoning inside <thinking>...</thinking>;\n"
        "- a single <update>...</update> holding the new memory: everything useful from the old memory plus "
        "what this section adds toward the answer;\n"
        "- only when you have found part of the evidence and need something you saw earlier, a single "
        "<recall>search query</recall> (for example <recall>where was the director born?</recall>) to look "
        "through your earlier memories.\n\n"
        "<problem>\n{question}\n</problem>\n\n"
        "<recalled_memory>\n{recalled}\n</recalled_memory>\n\n"
        "<memory>\n{memory}\n</memory>\n\n"
        "<section>\n{chunk}\n</section>\n\n"
        "New memory:\n"
    ),
    "final": (
        "Below are a question and the memory you kept while reading a long article. Answer the question "
        "from the memory and write the answer inside \\boxed{}.\n\n"
        "<problem>\n{question}\n</problem>\n\n"
        "<recalled_memory>\n{recalled}\n</recalled_memory>\n\n"
        "<memory>\n{memory}\n</memory>\n\n"
        "Answer:\n"
    ),
    "no_memory": "Nothing recorded yet.",
    "no_recall": "Nothing was recalled.",
}

_UPDATE = re.compile(r"<update>(.*?)</update>", re.S)
_RECALL = re.compile(r"<recall>(.*?)</recall>", re.S)
_BOXED = re.compile(r"\\boxed\s*\{")
_TAG = re.compile(r"</?\w+>")
# The released code's patterns: '.' stops at a newline, so these match within one line only.
_R_QUERY = re.compile(r"<recall>(.+)</recall>")
_R_UPDATE = re.compile(r"<update>(.*?)</update>")
_R_MEMORY = re.compile(r"<memory>(.*?)</memory>")
_R_BOXED = re.compile(r"\\boxed{(.+)}")


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


def released_coverage(text: str, golds: Sequence[str]) -> float:
    """ReMemR1's coverage: share of each gold's whitespace words found as raw substrings, mean over golds.

    Case-sensitive and unnormalised ("Paris" is in "Parisian", "paris" is not in "Paris"); a gold
    with no words adds 0 but still counts in the mean.
    """
    if not golds:
        return 0.0
    total = 0.0
    for g in golds:
        ws = g.split()
        if ws:
            total += sum(w in text for w in ws) / len(ws)
    return total / len(golds)


def released_state_reward(prompt: str, response: str, recalled: str, golds: Sequence[str], final: bool) -> float:
    """ReMemR1's per-turn state reward (format + action) on decoded texts, as its trainer computes it.

    ``recalled`` is the text this turn's query retrieved, or the placeholder when it retrieved nothing.
    """
    if final:
        return float(sum(1 for a in _R_BOXED.findall(response) if a.strip()) == 1)
    updates = _R_UPDATE.findall(response)
    fmt = float(sum(1 for u in updates if u.strip()) == 1)
    previous = _R_MEMORY.findall(prompt)
    update = released_coverage(updates[0] if updates else "", golds) - released_coverage(
        previous[0] if previous else "", golds)
    # what the recalled text adds to the prompt's coverage (ReMemR1 6d8401f; before it, recalled alone)
    revisit = max(0.0, released_coverage(recalled + " " + prompt, golds) - released_coverage(prompt, golds))
    return fmt + update + revisit


class _Prompts:
    def __init__(self, tokenizer: Any, texts: dict[str, str]) -> None:
        self.memory = TokenTemplate(texts["memory"], tokenizer)
        self.final = TokenTemplate(texts["final"], tokenizer)
        self.no_memory = tokenizer.encode(texts["no_memory"], add_special_tokens=False)
        self.no_memory_text = texts["no_memory"]
        self.no_recall = tokenizer.encode(texts["no_recall"], add_special_tokens=False)
        self.no_recall_text = texts["no_recall"]
        self.stops = stop_token_ids(tokenizer)


class _Slots:
    """How question, memory, recalled memory and chunk enter a prompt: spliced token ids (training), or text
    filled in and tokenized whole (``slot_fill=text``: the ids a server builds from ReMemR1's client)."""

    def __init__(self, tokenizer: Any, p: _Prompts, question: list[int], text: str, as_text: bool) -> None:
        self.tokenizer, self.p, self.question, self.as_text = tokenizer, p, question, as_text
        whole = not as_text or len(question) == len(encode_text(tokenizer, text))  # question_tokens cut nothing
        self.question_text = text if whole else tokenizer.decode(question)

    def render(self, template: TokenTemplate, memory: tuple[list[int], str], recalled: tuple[list[int], str],
               chunk: list[int] | None = None) -> list[int]:
        """``memory`` / ``recalled``: (ids, text) of each slot; the chunk as context ids."""
        if not self.as_text:
            extra = {} if chunk is None else {"chunk": chunk}
            return template.render(question=self.question, memory=memory[0], recalled=recalled[0], **extra)
        extra = {} if chunk is None else {"chunk": self.tokenizer.decode(chunk)}  # as the client decodes it
        return template.render_text(question=self.question_text, memory=memory[1], recalled=recalled[1], **extra)

    def missed(self, query: str | None, released: bool) -> tuple[list[int], str]:
        """The recalled slot when nothing was found. ReMemR1's client shows the text ``None`` when a query
        found no memory its TF-IDF could fit (every memory without terms); otherwise the placeholder."""
        if self.as_text and released and query is not None:
            return encode_text(self.tokenizer, "None"), "None"
        return self.p.no_recall, self.p.no_recall_text


class _Pool:
    """The memories a recall query searches, with the token ids to show for a hit."""

    def __init__(self, tokenizer: Any, released: bool) -> None:
        self.index: TfidfIndex | SubwordTfidfIndex = SubwordTfidfIndex(tokenizer) if released else TfidfIndex()
        self.entries: list[tuple[list[int], str]] = []

    def add(self, ids: list[int], text: str) -> None:
        if self.index.add(text) == len(self.entries):  # the released index keeps one copy of a repeated text
            self.entries.append((ids, text))

    def find(self, query: str) -> tuple[list[int], str] | None:
        hit = self.index.top1(query)
        return None if hit is None else self.entries[hit[0]]


def _memory_turn(tokenizer: Any, out: list[int], released: bool) -> tuple[list[int], str, str | None]:
    """(memory ids carried forward, memory text, recall query or None) of one memory-turn response."""
    if released:
        text = decode(tokenizer, out)
        m = _R_QUERY.search(text)
        memory_text = _RECALL.sub("", text).strip()
        return encode_text(tokenizer, memory_text), memory_text, (m.group(1) if m else None)
    text = tokenizer.decode(out, skip_special_tokens=False)
    recalls = list(_RECALL.finditer(text))
    memory = out
    for m in reversed(recalls):  # cut every recall section, last first so offsets stay valid
        memory = cut_span(tokenizer, memory, m.start(), m.end())
    return memory, decode(tokenizer, memory), (recalls[-1].group(1) if recalls else None)


def _recall(pool: Any, where: str, new_memory: list[int], new_text: str, query: str | None,
            counts: dict[str, int]) -> tuple[list[int], str] | None:
    """Search earlier memories for the turn's query (``recall_pool``: before or after adding this turn's)."""
    if where == "including_current":
        pool.add(new_memory, new_text)
    hit = pool.find(query) if query else None
    counts["recalls"] += query is not None
    counts["recall_hits"] += hit is not None
    if where == "previous":
        pool.add(new_memory, new_text)
    return hit


def _state_reward(updates: list[str], memory_text: str, new_text: str, recalled_text: str,
                  golds: list[str]) -> float:
    """memrl's state reward of a memory turn: one well-formed update, plus the gold coverage it gained (and the
    recall's gain, never negative)."""
    well_formed = len(updates) == 1 and bool(updates[0].strip())
    gain = gold_coverage(new_text, golds) - gold_coverage(memory_text, golds)
    recall_gain = gold_coverage(new_text + " " + recalled_text, golds) - gold_coverage(new_text, golds)
    return float(well_formed) + gain + max(0.0, recall_gain)


def _final_conversation(tokenizer: Any, p: Any, prompt: list[int], res: Any, golds: list[str],
                        released: bool, state: str) -> Conversation:
    """The answer turn, with its state reward (one boxed answer; the released code's own rule)."""
    final_text = decode(tokenizer, strip_stop(res.token_ids, p.stops))
    if released:
        reward = released_state_reward("", final_text, "", golds, True)
    else:
        reward = float(len(_BOXED.findall(final_text)) == 1)
    return Conversation.from_prompt_response(prompt, res.token_ids, res.logprobs, reward=reward,
                                             meta={"kind": "final", "finish": res.finish_reason, "state": state})


def _inputs(sample: LongContextSample, tokenizer: Any, config: WorkflowConfig, p: _Prompts,
            released: bool) -> tuple[LongContextSample, list[int], int, _Slots]:
    """(the sample as read, context ids, original context length, how slots are filled)."""
    if released:  # the released client strips both before it tokenizes them
        sample = dataclasses.replace(sample, question=sample.question.strip(), context=sample.context.strip())
    as_text = config.slot_fill == "text"
    context, original_len, question = read_inputs(sample, tokenizer, config,
                                                  added_specials(tokenizer) if as_text else ([], []))
    return sample, context, original_len, _Slots(tokenizer, p, question, sample.question, as_text)


def _count_turn(counts: dict[str, int], finish_reason: str, updates: list[str]) -> None:
    counts["memory_truncated"] += finish_reason == "length"
    counts["no_update"] += not updates
    counts["multiple_update"] += len(updates) > 1


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
    released = config.rememr1_variant == "released"
    p = cached_prompts(_Prompts, tokenizer, config.prompts, RELEASED_PROMPTS if released else DEFAULT_PROMPTS)
    sample, context, original_len, fill = _inputs(sample, tokenizer, config, p, released)
    golds = sample.answers
    memory, memory_text, recalled, recalled_text = p.no_memory, p.no_memory_text, p.no_recall, p.no_recall_text
    pool = _Pool(tokenizer, released)
    conversations: list[Conversation] = []
    counts = {"no_update": 0, "multiple_update": 0, "recalls": 0, "recall_hits": 0, "memory_truncated": 0}
    params = sampling.with_(max_new_tokens=config.memory_tokens, stop_token_ids=p.stops)
    for k in range(math.ceil(len(context) / config.chunk_tokens)):
        chunk = context[k * config.chunk_tokens: (k + 1) * config.chunk_tokens]
        prompt = fill.render(p.memory, (memory, memory_text), (recalled, recalled_text), chunk)
        seen = anchor(sample.question, k, memory_text, recalled_text)  # gigpo's state: what this turn saw
        res = await engine.generate(prompt, turn_seed(params, k))
        out = strip_stop(res.token_ids, p.stops)
        updates = _UPDATE.findall(tokenizer.decode(out, skip_special_tokens=False))
        _count_turn(counts, res.finish_reason, updates)
        new_memory, new_text, query = _memory_turn(tokenizer, out, released)

        hit = _recall(pool, config.recall_pool, new_memory, new_text, query, counts)
        # the slot is rewritten every turn: a turn without a (successful) query shows the placeholder
        recalled, recalled_text = hit if hit is not None else fill.missed(query, released)

        if released:
            reward = released_state_reward(decode(tokenizer, prompt), decode(tokenizer, res.token_ids),
                                           recalled_text, golds, False)
        else:
            reward = _state_reward(updates, "" if k == 0 else memory_text, new_text,
                                   recalled_text if hit is not None else "", golds)
        conversations.append(Conversation.from_prompt_response(
            prompt, res.token_ids, res.logprobs, reward=reward,
            meta={"kind": "memory", "chunk": k, "finish": res.finish_reason, "recall": query is not None, "state": seen}))
        memory, memory_text = new_memory, new_text

    slot = (recalled, recalled_text) if config.recall_in_final else (p.no_recall, p.no_recall_text)
    prompt = fill.render(p.final, (memory, memory_text), slot)
    final_params = sampling.with_(max_new_tokens=config.final_tokens, stop_token_ids=p.stops)
    res = await engine.generate(prompt, turn_seed(final_params, len(conversations)))
    seen = anchor(sample.question, "final", memory_text, slot[1])
    conversations.append(_final_conversation(tokenizer, p, prompt, res, golds, released, seen))
    return qa_trajectory(
        sample, tokenizer, conversations, res, p.stops, config.reward, sample_id=sample_id, group_id=group_id,
        metrics={"context_tokens": float(len(context)), "context_tokens_original": float(original_len),
                 **{k: float(v) for k, v in counts.items()}},
        info={"memory": memory_text if conversations[:-1] else "",
              "recalled": slot[1] if slot[1] not in (p.no_recall_text, "None") else ""},
        answer_format=config.answer_format,
    )
