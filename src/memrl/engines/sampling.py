"""Token selection from logits: temperature, top-k, top-p, greedy; log-probs.

Log-probs are those of the temperature-scaled distribution *before* top-k/top-p
filtering, the quantity the trainer recomputes (verl divides logits by the
rollout temperature), so engine and trainer log-probs are comparable.
"""

from __future__ import annotations

import torch

from memrl.engines.base import SamplingParams


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask (to -inf) tokens outside top-k and outside the top-p nucleus. ``logits``: [V]."""
    if top_k > 0 and top_k < logits.numel():
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # drop a token when the mass before it already reaches top_p (keeps at least one)
        drop_sorted = (torch.cumsum(probs, dim=-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def select_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> tuple[int, float]:
    """Pick the next token for one sequence; returns ``(token_id, logprob)``."""
    logits = logits.float()
    if params.is_greedy:
        logp = torch.log_softmax(logits, dim=-1)
        tok = int(torch.argmax(logits))
        return tok, float(logp[tok])
    scaled = logits / params.temperature
    logp = torch.log_softmax(scaled, dim=-1)
    filtered = filter_logits(scaled, params.top_k, params.top_p)
    probs = torch.softmax(filtered, dim=-1)
    tok = int(torch.multinomial(probs, 1, generator=generator))
    return tok, float(logp[tok])
