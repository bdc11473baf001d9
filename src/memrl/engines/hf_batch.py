"""One batch of the HF engine's decode, in pieces: left padding, the shared-prompt prefill, a sampling step.

``HFEngine._decode`` strings them together. Every row keeps its outputs in its own slot and draws from
its own generator when seeded, so what a row generates does not depend on the rows beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from memrl.engines.base import GenerationResult, SamplingParams
from memrl.engines.kv_cache import append_rows, reserved_cache
from memrl.engines.sampling import select_tokens, top_logprobs


@dataclass
class Request:
    """A queued ``generate`` call: its prompt, its parameters, the future its caller awaits, its seeded draws."""

    prompt: list[int]
    params: SamplingParams
    future: asyncio.Future[GenerationResult]
    generator: torch.Generator | None
    cut: bool = False  # set by HFEngine.interrupt: leave at the next step with the tokens so far
    owner: object = None  # who asked (memrl serve: one HTTP request): batches take owners in turn


def completes_stop(tokenizer: Any, ids: list[int], params: SamplingParams) -> bool:
    """Whether the last token of ``ids`` completes one of ``params.stop`` in the decoded text.

    Checked after every token, so a stop string seen now was not there one token earlier: only the tail
    that can hold the longest one is decoded (4 tokens a character: a byte-level token may be one byte
    of it), and the cost per token stays flat however long the answer. A tail that decodes differently
    from the whole (a dropped leading space) can only miss a stop, never invent one, and a miss only
    means decoding on to the budget, as without a tokenizer: the caller trims the text either way.
    """
    if tokenizer is None:
        return False
    tail = ids[-(4 * max(map(len, params.stop)) + 2):]
    text = tokenizer.decode(tail, skip_special_tokens=params.skip_special_tokens)
    return any(s in text for s in params.stop)


def cache_keyword(model: Any) -> str:
    """The name ``forward`` takes the KV cache under: ``cache`` since transformers 5.x renamed it (the old
    ``past_key_values`` still works but warns on every call), ``past_key_values`` before."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a peft wrapper passes it on
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def vocab_size(model: Any) -> int | None:
    """Rows of the input embedding: the exclusive upper bound of a valid token id."""
    with contextlib.suppress(Exception):
        return int(model.get_input_embeddings().num_embeddings)
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    return int(size) if size else None


def fair_order(pending: Sequence[Request]) -> list[Request]:
    """``pending`` with owners taking turns: each owner's first request (in arrival order), then each one's
    second, and so on. Requests without an owner (training, eval) keep their places: arrival order."""
    if all(r.owner is None for r in pending):
        return list(pending)
    turn: dict[object, int] = {}
    keyed = []
    for pos, req in enumerate(pending):
        rank = 0
        if req.owner is not None:
            rank = turn.get(req.owner, 0)
            turn[req.owner] = rank + 1
        keyed.append((rank, pos, req))
    return [req for _, _, req in sorted(keyed, key=lambda k: (k[0], k[1]))]


Answer = Callable[[Request, GenerationResult], None]


def left_padded(prompts: Sequence[list[int]], pad_token_id: int,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Prompts right-aligned in one tensor (padded on the left), their attention mask and position ids."""
    lengths = [len(p) for p in prompts]
    width = max(lengths)
    input_ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, prompt in enumerate(prompts):
        input_ids[i, width - lengths[i]:] = torch.tensor(prompt, dtype=torch.long)
        attention[i, width - lengths[i]:] = 1
    input_ids, attention = input_ids.to(device), attention.to(device)
    return input_ids, attention, (attention.cumsum(-1) - 1).clamp(min=0)


ATTENTION_BYTES = 12 * 2**30  # default cap on the attention scores of a padded prefill where they are materialized


def attention_cap(model: Any, limit: int | None) -> tuple[int, int] | None:
    """``(cap in bytes, heads)`` for a padded prefill's attention scores, or None where they are not materialized.

    A left-padded batch gives attention a mask; on a CPU (or with ``eager`` attention) the scores are then
    materialized, rows x heads x prompt length squared in float32: 32 rows of 12K tokens at 4 heads is
    over 70 GB. On a GPU, SDPA's memory-efficient kernels take the mask without them. ``limit``: the
    cap (``engine.max_attention_gb``), else :data:`ATTENTION_BYTES` where they are materialized."""
    cfg = getattr(model.config, "text_config", None) or model.config
    heads = int(getattr(cfg, "num_attention_heads", 0) or 1)
    if limit is None and not masks_materialize(model):
        return None
    return (ATTENTION_BYTES if limit is None else limit), heads


def masks_materialize(model: Any) -> bool:
    """Whether attention under a padding mask materializes the scores (a CPU, or ``eager`` attention): there a
    masked prefill also runs a slower kernel than the causal one, so prompts of other lengths prefill apart."""
    device = next(model.parameters()).device
    return device.type == "cpu" or getattr(model.config, "_attn_implementation", "") == "eager"


def over_attention(cap: tuple[int, int] | None, rows: int, lengths: set[int]) -> bool:
    """Whether prefilling ``rows`` distinct prompts of these ``lengths`` together would pass the attention cap
    (prompts of one length need no padding mask, so nothing is materialized)."""
    if cap is None or len(lengths) < 2:
        return False
    longest = max(lengths)
    return rows * cap[1] * longest * longest * 4 > cap[0]


SPLIT_PREFILL_TOKENS = 512  # where masks materialize, a batch whose longest prompt reaches this prefills by length


def prefill(model: Any, cache_kw: str, cache: Any, prompts: Sequence[list[int]], input_ids: torch.Tensor,
            attention: torch.Tensor, positions: torch.Tensor, split: bool = False) -> torch.Tensor:
    """Fill ``cache`` with the prompts and return each row's next-token logits.

    A prompt sent several times (GRPO's n samples of it) is prefilled once, then its cache row repeated.
    ``split`` (where masks materialize: :func:`masks_materialize`): prompts of different lengths, the longest
    of at least :data:`SPLIT_PREFILL_TOKENS`, prefill one length at a time without a mask, and their caches
    are joined left-padded, as one padded prefill would have left them: on 2 CPU cores, four SmolLM2 prompts of
    1.5-3K tokens took 17.2 s against 31.2 s padded together (``bench/prefill_split.py``).
    """
    device = input_ids.device
    first: dict[tuple[int, ...], int] = {}  # prompt -> its unique slot
    copy_of = [first.setdefault(tuple(p), len(first)) for p in prompts]
    unique = torch.tensor([copy_of.index(u) for u in range(len(first))], device=device)
    lengths = [len(p) for p in first]
    if split and len(set(lengths)) > 1 and max(lengths) >= SPLIT_PREFILL_TOKENS:
        logits = _prefill_by_length(model, cache_kw, cache, lengths, input_ids[unique], positions[unique])
    else:
        out = model(input_ids=input_ids[unique], attention_mask=attention[unique], position_ids=positions[unique],
                    **{cache_kw: cache}, use_cache=True, logits_to_keep=1)
        logits = out.logits[:, -1, :]
    if len(first) < len(prompts):
        spread = torch.tensor(copy_of, device=device)
        cache.batch_select_indices(spread)
        logits = logits[spread]
    return logits


def _prefill_by_length(model: Any, cache_kw: str, cache: Any, lengths: list[int], input_ids: torch.Tensor,
                       positions: torch.Tensor) -> torch.Tensor:
    """:func:`prefill` of left-padded rows one length at a time (longest first, into ``cache``; each other length
    into a cache of its own, appended with :func:`~memrl.engines.kv_cache.append_rows`), rows put back in order."""
    order = sorted(set(lengths), reverse=True)
    placed: list[int] = []
    parts = []
    for k, length in enumerate(order):
        rows = [i for i, n in enumerate(lengths) if n == length]
        part = cache if k == 0 else reserved_cache(length + _room(cache))
        out = model(input_ids=input_ids[rows, -length:], attention_mask=torch.ones_like(input_ids[rows, -length:]),
                    position_ids=positions[rows, -length:], **{cache_kw: part}, use_cache=True, logits_to_keep=1)
        parts.append(out.logits[:, -1, :])
        if k:
            append_rows(cache, part)
        placed += rows
    back = torch.tensor([placed.index(i) for i in range(len(lengths))], device=input_ids.device)
    cache.batch_select_indices(back)
    return torch.cat(parts)[back]


def _room(cache: Any) -> int:
    """Positions ``cache`` reserves past its prompt (decode room), so the joined caches keep the same reserve."""
    layer = cache.layers[0]
    return int(layer._k.shape[-2] - layer.filled)


class EagerStepper:
    """The eager decode step over a growing cache: the batch's attention mask gains a column per token.

    :class:`memrl.engines.hf_static.StaticDecoder` has the same ``drop``/``forward`` over preallocated
    tensors, so ``HFEngine._decode`` drives either.
    """

    def __init__(self, model: Any, cache_kw: str, cache: Any, attention: torch.Tensor,
                 last_pos: torch.Tensor) -> None:
        self.model, self.cache_kw, self.cache = model, cache_kw, cache
        self.attention, self.last_pos = attention, last_pos
        self.admits = True  # takes rows that join mid-batch (off after a join failed)

    def drop(self, keep: list[int]) -> None:
        """Keep only the rows ``keep`` (indices among the live rows) in the batch and the cache."""
        idx = torch.tensor(keep, device=self.attention.device)
        self.cache.batch_select_indices(idx)
        self.attention, self.last_pos = self.attention[idx], self.last_pos[idx]

    @property
    def width(self) -> int:
        """Columns of the cache (and attention mask) every row's filled part ends at."""
        return int(self.attention.shape[1])

    def admit(self, cache: Any, attention: torch.Tensor, last_pos: torch.Tensor) -> None:
        """Append prefilled rows (their cache, mask and last positions) after the live ones; the narrower side
        is left-padded with masked columns (:func:`~memrl.engines.kv_cache.append_rows`)."""
        seen = self.attention.any(dim=0)  # columns some live row attends to; those before the first are dropped
        skip = int(seen.int().argmax()) if bool(seen.any()) else 0
        width = max(self.width - skip, attention.shape[1])
        pad = [torch.nn.functional.pad(a, (width - a.shape[1], 0)) for a in (self.attention[:, skip:], attention)]
        merged, last = torch.cat(pad), torch.cat([self.last_pos, last_pos])
        append_rows(self.cache, cache, skip)  # the one step that changes the cache: all or nothing
        self.attention, self.last_pos = merged, last

    def forward(self, next_tokens: list[int]) -> torch.Tensor:
        """Feed each live row its token; the next-token logits ``[n, vocab]``."""
        self.attention = torch.cat([self.attention, self.attention.new_ones((len(next_tokens), 1))], dim=1)
        self.last_pos = self.last_pos + 1
        tokens = torch.tensor(next_tokens, dtype=torch.long, device=self.attention.device)[:, None]
        out = self.model(input_ids=tokens, attention_mask=self.attention, position_ids=self.last_pos[:, None],
                         **{self.cache_kw: self.cache}, use_cache=True)
        return out.logits[:, -1, :]


class BatchRows:
    """What each row of a batch has generated, and why it stopped (``None`` while it decodes).

    ``answer(request, result)``, when given, hears of each row as it finishes, so a short row is
    answered without waiting for its batch-mates.
    """

    def __init__(self, reqs: list[Request], answer: Answer | None, weight_version: int,
                 tokenizer: Any = None, stats: Any = None) -> None:
        self.reqs, self.answer, self.weight_version = list(reqs), answer, weight_version
        self.tokenizer = tokenizer  # reads stop strings (SamplingParams.stop); None: rows run on to their budget
        self.stats = stats  # its generated_tokens count a step's tokens before any of its rows is answered
        self.ids: list[list[int]] = [[] for _ in reqs]
        self.logprobs: list[list[float]] = [[] for _ in reqs]
        self.top: list[list[list[tuple[int, float]]]] = [[] for _ in reqs]
        self.reasons: list[str | None] = [None] * len(reqs)

    def start(self, first: int = 0) -> list[int]:
        """Finish the rows from ``first`` on with nothing to decode (cancelled already, or no new tokens asked);
        the others."""
        for i in range(first, len(self.reqs)):
            r = self.reqs[i]
            if r.future.done() or r.cut:
                self.finish(i, "abort")
            elif r.params.max_new_tokens == 0:
                self.finish(i, "length")
        return [i for i in range(first, len(self.reqs)) if self.reasons[i] is None]

    def add(self, reqs: list[Request]) -> list[int]:
        """Rows for requests joining the running batch (continuous batching); those of them left to decode."""
        first = len(self.reqs)
        self.reqs += reqs
        self.ids += [[] for _ in reqs]
        self.logprobs += [[] for _ in reqs]
        self.top += [[] for _ in reqs]
        self.reasons += [None] * len(reqs)
        return self.start(first)

    def tokens_left(self, i: int) -> int:
        """New tokens row ``i`` may still generate."""
        return self.reqs[i].params.max_new_tokens - len(self.ids[i])

    def result(self, i: int) -> GenerationResult:
        extra = {"top_logprobs": self.top[i]} if self.reqs[i].params.top_logprobs else {}
        return GenerationResult(self.ids[i], self.logprobs[i], self.reasons[i] or "length",  # type: ignore[arg-type]
                                {"weight_version": self.weight_version, **extra})

    def results(self) -> list[GenerationResult]:
        return [self.result(i) for i in range(len(self.reqs))]

    def finish(self, i: int, reason: str) -> None:
        self.reasons[i] = reason
        if self.answer is not None:
            self.answer(self.reqs[i], self.result(i))

    def step(self, active: list[int], logits: torch.Tensor, default_generator: torch.Generator,
             pad_token_id: int) -> list[int]:
        """Draw the next token of every active row its caller still waits for, and finish the rows that end.

        One batched draw for all of them, each under its own parameters and generator. Returns the
        token each active row feeds back next (the pad for a row cancelled at this step).
        """
        next_tokens = [pad_token_id] * len(active)
        live = []
        for j, i in enumerate(active):
            if self.reqs[i].future.done() or self.reqs[i].cut:  # cancelled, or interrupted: stop decoding it
                self.finish(i, "abort")
            else:
                live.append(j)
        if not live:
            return next_tokens
        rows = logits if len(live) == len(active) else logits[torch.tensor(live, device=logits.device)]
        row_params = [self.reqs[active[j]].params for j in live]
        generators = [self.reqs[active[j]].generator or default_generator for j in live]
        shared = default_generator.get_state() if any(g is default_generator for g in generators) else None
        try:
            toks, lps = select_tokens(rows, row_params, generators)
        except RuntimeError:  # the batch is decoded again row by row: the unseeded rows' draws are not spent
            if shared is not None:
                default_generator.set_state(shared)
            raise
        tops = top_logprobs(rows, row_params)
        if self.stats is not None:
            self.stats.generated_tokens += len(live)
        for j, tok, lp, top in zip(live, toks, lps, tops):
            i, params = active[j], self.reqs[active[j]].params
            self.ids[i].append(tok)
            self.logprobs[i].append(lp)
            if top is not None:
                self.top[i].append(top)
            next_tokens[j] = tok
            if tok in params.stop_token_ids or (params.stop and completes_stop(self.tokenizer, self.ids[i], params)):
                self.finish(i, "stop")
            elif len(self.ids[i]) >= params.max_new_tokens:
                self.finish(i, "length")
        return next_tokens
