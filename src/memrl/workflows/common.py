"""Helpers shared by workflows: stop tokens, truncation, answer scoring."""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from memrl.data.longctx import LongContextSample
from memrl.engines.base import GenerationResult, SamplingParams
from memrl.rewards.published import extract_answer
from memrl.rewards.qa import QAScores, score_answer
from memrl.text.tokens import decode, encode_text, stop_token_ids, strip_stop  # noqa: F401  (re-exported)
from memrl.types import Conversation, Trajectory


def _exact(part: Any) -> Any:
    """A JSON form of a part ``json`` cannot write: arrays and tensors by every value (their ``str`` rounds
    to 4 digits and elides long arrays, which would put different observations in one state), sets by their
    members' JSON in order, others by ``str``."""
    tolist = getattr(part, "tolist", None)
    if callable(tolist):
        return tolist()
    return sorted(map(_blob, part)) if isinstance(part, (set, frozenset)) else str(part)


def _blob(part: Any) -> str:
    try:
        return json.dumps(part, sort_keys=True, default=_exact, ensure_ascii=False)
    except TypeError:  # dict keys json cannot sort or write (tuples, ints beside strs): pairs in a fixed order
        return json.dumps(_keyed(part), sort_keys=True, default=_exact, ensure_ascii=False)


def _keyed(part: Any) -> Any:
    """``part`` with every dict as its sorted [key, value] pairs, each key by its JSON (any key type)."""
    if isinstance(part, dict):
        return {"dict": sorted([_blob(k), _keyed(v)] for k, v in part.items())}
    if isinstance(part, (list, tuple)):
        return [_keyed(p) for p in part]
    return part


def anchor(*parts: Any) -> str:
    """A short stable hash of what defines a turn's state (``ep.generate(..., state=anchor(...))``):
    equal parts give equal keys across episodes and processes (no Python ``hash`` salt); dicts compare
    whatever their key order (any key type), arrays and tensors by their exact values (as verl-agent's)."""
    return hashlib.sha1(_blob(parts).encode("utf-8")).hexdigest()[:16]


def state_key(state: Any) -> str:
    """The key a turn's ``state=`` is compared by: a string or number as written (readable in the viewer),
    anything else (an array, a dict, a tuple) through :func:`anchor`, exactly."""
    if isinstance(state, (str, int, float)):
        return str(state)
    return anchor(state)


def turn_seed(params: SamplingParams, turn: int) -> SamplingParams:
    """A seeded episode gives each turn its own seed, so turns do not replay one random stream."""
    return params if params.seed is None else params.with_(seed=params.seed * 1009 + turn)


def centre_truncate(ids: Sequence[int], limit: int | None) -> list[int]:
    """Keep the first and last halves when longer than ``limit`` (MemAgent/verl 'center')."""
    ids = list(ids)
    if limit is None or len(ids) <= limit:
        return ids
    head = limit // 2
    return ids[:head] + ids[len(ids) - (limit - head):]


def score_text(text: str, golds: Sequence[str], reward: str, answer_format: str = "boxed",
               sample: Any = None) -> tuple[str | None, QAScores, float]:
    """Extract the answer (``workflow.answer_format``), score it, and pick the configured reward.

    The reward is a built-in (``em``, ``sub_em``, ``f1``, ``memagent_strict``: MemAgent's own
    training reward on the raw text) or a plug-in by import path; see :mod:`memrl.plugins`.
    """
    from memrl.plugins import reward_value

    answer = extract_answer(text, answer_format)
    return answer, score_answer(answer, golds), reward_value(reward, text, golds, answer, sample)


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
    answer, scores, reward = score_text(final_text, sample.answers, reward_key, answer_format, sample)
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


def read_inputs(sample: LongContextSample, tokenizer: Any, config: Any,
                specials: tuple[list[int], list[int]] = ([], [])) -> tuple[list[int], int, list[int]]:
    """(context ids after ``max_chunks`` centre truncation, original context length, question ids);
    ``specials``: ids around the context's, as ``tokenizer.encode(context)`` adds them (:func:`added_specials`)."""
    context = [*specials[0], *encode_text(tokenizer, sample.context), *specials[1]]
    original_len = len(context)
    if config.max_chunks is not None:
        context = centre_truncate(context, config.max_chunks * config.chunk_tokens)
    return context, original_len, encode_text(tokenizer, sample.question)[: config.question_tokens]


# Streaming a context from disk: text is encoded in pieces of about PIECE_CHARS characters, cut where
# encoding both sides apart gives the same ids as encoding them together (checked on CUT_WINDOW chars).
# Small pieces: the Rust tokenizer's working memory is ~100 bytes per input character (1M-character
# pieces peaked 390 MiB above the baseline, 16K ones 14 MiB, and were faster).
PIECE_CHARS = 1 << 14
CUT_WINDOW = 256
_CUT_POINTS = (("\n\nDocument ", 2), ("\n", 1), (" ", 0))  # (text, cut offset in it): document starts first


def _safe_cut(tokenizer: Any, text: str, lo: int, hi: int) -> int | None:
    """The last cut in ``text[lo:hi]`` at which a piece boundary changes no token, else None.

    Byte-level BPE (GPT-2, Qwen, Llama 3) never merges across the start of a line after a blank
    line, so the first candidate (just before ``Document k:``) nearly always passes; a tokenizer that
    prefixes every encoded text with a space (SentencePiece's dummy prefix) fails every check and
    the text is then encoded whole, as before.
    """
    end = min(hi, len(text) - CUT_WINDOW)
    for sep, offset in _CUT_POINTS:
        i = text.rfind(sep, lo, end)
        for _ in range(4):
            if i < lo:
                break
            cut = i + offset
            left, right = text[max(0, cut - CUT_WINDOW):cut], text[cut:cut + CUT_WINDOW]
            if left and encode_text(tokenizer, left) + encode_text(tokenizer, right) == encode_text(tokenizer,
                                                                                                   left + right):
                return cut
            i = text.rfind(sep, lo, i)
    return None


def encode_pieces(tokenizer: Any, pieces: Iterable[str], piece_chars: int | None = None) -> Iterator[list[int]]:
    """Token ids of the concatenated ``pieces``, in runs, without holding the whole text or its encoding."""
    piece_chars = piece_chars or PIECE_CHARS
    buf = ""
    for piece in pieces:
        buf += piece
        while len(buf) >= piece_chars + CUT_WINDOW:
            cut = _safe_cut(tokenizer, buf, piece_chars // 2, piece_chars)
            if cut is None:  # rare: no safe cut near the target size, take any; none at all: read on
                cut = _safe_cut(tokenizer, buf, 1, len(buf))
                if cut is None:
                    break
            yield encode_text(tokenizer, buf[:cut])
            buf = buf[cut:]
    if buf:
        yield encode_text(tokenizer, buf)


class ContextChunks:
    """The context's token ids in runs of ``chunk_tokens``, after ``max_chunks`` centre truncation.

    A sample read lazily from disk (one with ``context_pieces``, see :mod:`memrl.data.stream`) is
    encoded piece by piece while the chunks are consumed, so a 3.5M-token context is never one string
    nor one list of ids; with ``max_chunks`` only the kept head and a bounded tail are held. Other
    samples are encoded whole, as :func:`read_inputs` does. ``original`` and ``kept`` (token counts)
    are final once iteration ends.
    """

    def __init__(self, sample: LongContextSample, tokenizer: Any, config: Any,
                 specials: tuple[list[int], list[int]] = ([], [])) -> None:
        self.sample, self.tokenizer, self.config = sample, tokenizer, config
        self.specials = specials  # ids around the context's, as tokenizer.encode(context) adds them
        self.original = self.kept = 0

    def _runs(self) -> Iterator[list[int]]:
        prefix, suffix = self.specials
        if prefix:
            yield list(prefix)
        pieces = getattr(self.sample, "context_pieces", None)
        if pieces is None:
            yield encode_text(self.tokenizer, self.sample.context)
        else:
            yield from encode_pieces(self.tokenizer, pieces())
        if suffix:
            yield list(suffix)


    def __iter__(self) -> Iterator[list[int]]:
        size, max_chunks = self.config.chunk_tokens, self.config.max_chunks
        if max_chunks is not None:  # everything must be seen before knowing what the centre cut drops
            limit = max_chunks * size
            head: list[int] = []
            tail: deque[int] = deque(maxlen=limit - limit // 2)
            for run in self._runs():
                self.original += len(run)
                room = limit // 2 - len(head)
                head += run[:max(room, 0)]
                tail.extend(run[max(room, 0):])
            ids = head + list(tail)
            self.kept = len(ids)
            for k in range(0, len(ids), size):
                yield ids[k:k + size]
            return
        pending: list[int] = []
        for run in self._runs():
            self.original += len(run)
            pending += run
            k = 0
            while len(pending) - k >= size:
                yield pending[k:k + size]
                k += size
            del pending[:k]
        if pending:
            yield pending
        self.kept = self.original


def added_specials(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The ids ``tokenizer.encode(text)`` puts before and after a text by default: a BOS for Llama-3's tokenizer,
    nothing for Qwen's. MemAgent's and ReMemR1's clients encode the context so, so their first chunk carries
    them (decoded as text) and every chunk boundary moves with them."""
    probe = "memrl probe"
    plain = encode_text(tokenizer, probe)
    full = list(tokenizer.encode(probe))
    for i in range(len(full) - len(plain) + 1):
        if full[i:i + len(plain)] == plain:
            return full[:i], full[i + len(plain):]
    return [], []


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
