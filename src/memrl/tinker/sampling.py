"""Sampling for ``asample``: Tinker's ``SamplingParams`` on memrl's batching HF engine, plus prompt log-probs.

Each of ``num_samples`` completions is one engine request (seeded ``seed + i`` when a seed is given,
so the samples differ yet repeat run to run); the engine decodes them, and every other sample request
queued for the same weights, as one batch. Log-probs are memrl's: those of the temperature-scaled
distribution before top-k/top-p filtering (``memrl.engines.sampling``), the quantity a trainer
recomputes; at temperature 1 they equal what ``forward`` returns for the same tokens.

Stops: ``stop=None`` ends at the tokenizer's EOS ids; ``[]`` never stops early; a list of token ids ends
at exactly those (EOS only if listed); strings end at EOS or at the string: a string that is one token
is a stop token, a longer one is found in the decoded text and the sequence is cut after the token
that completes it. The stop token itself is kept in ``tokens`` (the policy must learn to emit it).
Prompt log-probs (``include_prompt_logprobs``, ``compute_logprobs``) score each prompt token given the
ones before it at the request's temperature; position 0 (and those before ``prompt_logprobs_last_n``)
is NaN on the wire, ``None`` in the SDK.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from memrl.engines.base import GenerationResult, SamplingParams
from memrl.serve.fields import cut_at_stop
from memrl.tinker.wire import Sequence

TopK = list[list[tuple[int, float]] | None]


@dataclass
class SampleJob:
    """One ``asample`` request, decoded and checked."""

    prompt: list[int]
    params: list[SamplingParams]
    stop_strings: list[str] = field(default_factory=list)
    prompt_logprobs: bool = False
    last_n: int | None = None
    topk_prompt: int = 0


def eos_ids(tokenizer: Any, model: Any) -> tuple[int, ...]:
    """The ids that end a completion by default: the tokenizer's EOS and the generation config's."""
    ids: list[int] = []
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.append(int(tokenizer.eos_token_id))
    gen = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids += [int(i) for i in (gen if isinstance(gen, (list, tuple)) else [gen] if gen is not None else [])]
    return tuple(dict.fromkeys(ids))


def stops(stop: Any, tokenizer: Any, eos: tuple[int, ...]) -> tuple[tuple[int, ...], list[str]]:
    """``(stop token ids, stop strings to find in the text)`` for Tinker's ``stop`` field."""
    if stop is None:
        return eos, []
    items = [stop] if isinstance(stop, str) else list(stop)
    if all(isinstance(s, int) and not isinstance(s, bool) for s in items):
        return tuple(items), []
    if not all(isinstance(s, str) and s for s in items):
        raise ValueError("sampling_params.stop: a list of token ids, or of non-empty strings")
    ids, strings = list(eos), []
    for s in items:
        enc = tokenizer.encode(s, add_special_tokens=False)
        if len(enc) == 1 and tokenizer.decode(enc) == s:
            ids.append(enc[0])
        else:
            strings.append(s)
    return tuple(dict.fromkeys(ids)), strings


def engine_params(sp: dict[str, Any], num_samples: int, stop_ids: tuple[int, ...], topk: int,
                  strings: list[str] | tuple[str, ...] = ()) -> list[SamplingParams]:
    """One memrl ``SamplingParams`` per sample (Tinker's ``top_k=-1`` is memrl's 0: no limit). ``strings``: the
    engine stops decoding where :func:`cut_at_strings` will cut (both read the text with special tokens)."""
    seed = sp.get("seed")
    return [SamplingParams(max_new_tokens=int(sp["max_tokens"]), temperature=float(sp.get("temperature", 1.0)),
                           top_p=float(sp.get("top_p", 1.0)), top_k=max(0, int(sp.get("top_k", -1))),
                           stop_token_ids=stop_ids, seed=None if seed is None else int(seed) + i, top_logprobs=topk,
                           stop=tuple(strings), skip_special_tokens=False)
            for i in range(num_samples)]


def cut_at_strings(result: GenerationResult, strings: list[str], tokenizer: Any) -> Sequence:
    """A wire ``Sequence``, cut after the token that completes the first stop string (if any appears)."""
    tokens, logprobs = list(result.token_ids), list(result.logprobs)
    top = result.meta.get("top_logprobs")
    reason = "stop" if result.finish_reason == "stop" else "length"
    cut = cut_at_stop(lambda ids: tokenizer.decode(list(ids)), tokens, strings)
    if cut is not None:
        keep = cut[0]
        tokens, logprobs, top, reason = tokens[:keep], logprobs[:keep], top[:keep] if top else top, "stop"
    return Sequence(tokens, logprobs, reason, top)


@torch.inference_mode()
def prompt_scores(model: Any, job: SampleJob) -> tuple[list[float], TopK | None]:
    """Log-prob of each prompt token given the ones before it (NaN where not scored), and top-k rows."""
    device = next(model.parameters()).device
    ids = torch.tensor([job.prompt], dtype=torch.long, device=device)
    temp = 1.0 if job.params[0].is_greedy else job.params[0].temperature
    logp = torch.log_softmax(model(input_ids=ids, use_cache=False).logits[0].float() / temp, -1)
    n = len(job.prompt)
    first = 1 if job.last_n is None else max(1, n - job.last_n)
    scored = logp[:-1].gather(-1, ids[0, 1:].unsqueeze(-1)).squeeze(-1).tolist()
    values = [math.nan] * first + scored[first - 1:]
    top: TopK | None = None
    if job.topk_prompt > 0:
        v, i = logp[:-1].topk(min(job.topk_prompt, logp.shape[-1]), dim=-1)
        rows = [list(zip(a, b, strict=True)) for a, b in zip(i.tolist(), v.tolist(), strict=True)]
        top = [None] * first + rows[first - 1:]
    return values, top


async def run_group(engine: Any, model: Any, tokenizer: Any, jobs: list[SampleJob],
                    started: Callable[[int, asyncio.Task[Any]], None] | None = None) -> list[Any]:
    """Run sample requests together (the caller activated their shared weights); per job its
    ``(sequences, prompt_logprobs, topk_prompt)`` or the exception that failed it. ``started(i, task)`` is
    told each job's task: cancelling it stops that job's rows at the engine's next step (a cancelled future)."""
    async def one(job: SampleJob) -> tuple[list[Sequence], list[float] | None, TopK | None]:
        results = await asyncio.gather(*(engine.generate(job.prompt, p) for p in job.params))
        if any(r.finish_reason == "abort" for r in results):
            raise RuntimeError("sampling was interrupted (the server is stopping)")
        seqs = [cut_at_strings(r, job.stop_strings, tokenizer) for r in results]
        if not job.prompt_logprobs and not job.topk_prompt:
            return seqs, None, None
        values, top = await asyncio.to_thread(prompt_scores, model, job)
        return seqs, values if job.prompt_logprobs else None, top

    tasks = [asyncio.ensure_future(one(j)) for j in jobs]
    if started is not None:
        for i, task in enumerate(tasks):
            started(i, task)
    return list(await asyncio.gather(*tasks, return_exceptions=True))
