"""Policy loss, loss aggregation, KL estimators (verl ``core_algos`` semantics).

``agg_loss`` must see the whole mini-batch for ``token-mean``: the trainer
scales each micro-batch by its share of the mini-batch's tokens so the sum over
micro-batches equals one token-mean over the mini-batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from memrl.config.registry import KL_ESTIMATORS, LOSS_AGGREGATIONS
from memrl.rl.functional import masked_mean


@dataclass(frozen=True)
class LossAggregation:
    """``fn(loss_mat, loss_mask, norm_length) -> scalar``; ``per_token``: a mean over tokens (else over rows).

    ``per_token`` tells the trainer how to weight micro-batches so their sum is one aggregate
    over the mini-batch: by their share of its tokens, or of its rows; ``summed`` (a sum, not a
    mean): micro-batches add up as they are; ``normed``: it divides by a length ``norm_length`` (the
    trainer then gives every micro-batch one length, the step's, unless the config or workflow names one).
    """

    fn: Callable[[torch.Tensor, torch.Tensor, int | None], torch.Tensor]
    per_token: bool = False
    summed: bool = False
    normed: bool = False

    def __call__(self, loss_mat: torch.Tensor, loss_mask: torch.Tensor,
                 norm_length: int | None = None) -> torch.Tensor:
        return self.fn(loss_mat, loss_mask, norm_length)


def register_loss_agg(name: str, *, per_token: bool = False, summed: bool = False,
                      normed: bool = False) -> Callable[[Callable[..., torch.Tensor]], LossAggregation]:
    """Decorator: register ``fn(loss_mat, loss_mask, norm_length)`` as ``algorithm.loss_agg_mode=name``."""
    def decorate(fn: Callable[..., torch.Tensor]) -> LossAggregation:
        return LOSS_AGGREGATIONS.register(name, LossAggregation(fn, per_token, summed, normed))
    return decorate


def loss_aggregation(name: str) -> LossAggregation:
    """The aggregation ``name`` selects; a plain function given by import path aggregates over rows."""
    obj = LOSS_AGGREGATIONS.get(name)
    return obj if isinstance(obj, LossAggregation) else LossAggregation(obj)


def register_kl(*names: str) -> Callable[[Callable[..., torch.Tensor]], Callable[..., torch.Tensor]]:
    """Decorator: register ``fn(logprob, ref_logprob) -> per-token KL`` under each of ``names`` (aliases)."""
    def decorate(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        for name in names:
            KL_ESTIMATORS.register(name, fn)
        return fn
    return decorate


@register_loss_agg("token-mean", per_token=True)
def _token_mean(loss_mat: torch.Tensor, loss_mask: torch.Tensor, norm_length: int | None) -> torch.Tensor:
    """Mean over all valid tokens of the mini-batch."""
    return masked_mean(loss_mat, loss_mask)


@register_loss_agg("token-sum", per_token=True, summed=True)
def _token_sum(loss_mat: torch.Tensor, loss_mask: torch.Tensor, norm_length: int | None) -> torch.Tensor:
    """Sum over all valid tokens of the mini-batch, no normaliser (verl's ``token-sum``)."""
    return (loss_mat * loss_mask).sum()


@register_loss_agg("seq-mean-token-sum")
def _seq_mean_token_sum(loss_mat: torch.Tensor, loss_mask: torch.Tensor, norm_length: int | None) -> torch.Tensor:
    """Mean over rows of each row's token sum."""
    return (loss_mat * loss_mask).sum(dim=-1).mean()


@register_loss_agg("seq-mean-token-mean")
def _seq_mean_token_mean(loss_mat: torch.Tensor, loss_mask: torch.Tensor, norm_length: int | None) -> torch.Tensor:
    """Mean over rows of each row's token mean.

    A row with no token (a sequence the rollout correction rejected) counts as 0, not as 0/0 = NaN, which
    would drop the whole update."""
    return ((loss_mat * loss_mask).sum(dim=-1) / loss_mask.sum(dim=-1).clamp(min=1)).mean()


@register_loss_agg("seq-mean-token-sum-norm", normed=True)
def _seq_mean_token_sum_norm(loss_mat: torch.Tensor, loss_mask: torch.Tensor,
                             norm_length: int | None) -> torch.Tensor:
    """Dr. GRPO: the total over rows * L, a constant normaliser.

    ``L`` is ``norm_length`` (``algorithm.loss_scale_factor``, else the workflow's longest response), else the
    widest response span of the batch: from a row's first trained token to its last, as verl's padded
    response tensor is wide (a memrl row also holds its prompt, which the span leaves out)."""
    length = norm_length if norm_length is not None else response_width(loss_mask)
    return (loss_mat * loss_mask).sum(dim=-1).sum() / (loss_mask.shape[0] * length)


def response_width(loss_mask: torch.Tensor) -> int:
    """The widest span, over rows, from the first to the last position with mask > 0 (at least 1)."""
    trained = loss_mask > 0
    if not bool(trained.any()):
        return 1
    pos = torch.arange(loss_mask.shape[-1], device=loss_mask.device).expand_as(loss_mask)
    last = torch.where(trained, pos, -1).max(dim=-1).values
    first = torch.where(trained, pos, loss_mask.shape[-1]).min(dim=-1).values
    return max(int((last - first + 1).max()), 1)


AGG_MODES: tuple[str, ...] = LOSS_AGGREGATIONS.names  # the built-ins (plug-ins may add more)


def agg_loss(loss_mat: torch.Tensor, loss_mask: torch.Tensor, loss_agg_mode: str = "token-mean",
             norm_length: int | None = None) -> torch.Tensor:
    """Reduce a ``[B, T]`` loss to a scalar with the registered ``loss_agg_mode``.

    ``seq-mean-token-sum-norm`` divides the total by ``B * L`` with ``L = norm_length`` or the
    padded width ``T`` (Dr. GRPO).
    """
    return loss_aggregation(loss_agg_mode)(loss_mat, loss_mask, norm_length)


def compute_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange: float = 0.2,
    cliprange_low: float | None = None,
    cliprange_high: float | None = None,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
    norm_length: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO clipped surrogate with DAPO clip-higher and dual clip.

    Returns ``(pg_loss, clipfrac, ppo_kl, clipfrac_lower)`` like verl.
    ``norm_length`` is the constant of ``seq-mean-token-sum-norm`` (see :func:`agg_loss`).
    """
    if clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 for dual-clip PPO, got {clip_ratio_c}")
    low = cliprange if cliprange_low is None else cliprange_low
    high = cliprange if cliprange_high is None else cliprange_high
    neg_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(neg_kl)
    ppo_kl = masked_mean(-neg_kl, response_mask)
    l1 = -advantages * ratio
    l2 = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    c1 = torch.maximum(l1, l2)
    clipfrac = masked_mean(torch.gt(l2, l1).float(), response_mask)
    l3 = -advantages * clip_ratio_c
    c2 = torch.minimum(l3, c1)
    clipfrac_lower = masked_mean(torch.gt(c1, l3).float() * (advantages < 0).float(), response_mask)
    losses = torch.where(advantages < 0, c2, c1)
    return agg_loss(losses, response_mask, loss_agg_mode, norm_length), clipfrac, ppo_kl, clipfrac_lower


@register_kl("k1", "kl")
def _kl_k1(logprob: torch.Tensor, ref_logprob: torch.Tensor) -> torch.Tensor:
    """d = logp - ref (the unbiased, high-variance estimate)."""
    return logprob - ref_logprob


@register_kl("abs")
def _kl_abs(logprob: torch.Tensor, ref_logprob: torch.Tensor) -> torch.Tensor:
    """|logp - ref|."""
    return (logprob - ref_logprob).abs()


@register_kl("k2", "mse")
def _kl_k2(logprob: torch.Tensor, ref_logprob: torch.Tensor) -> torch.Tensor:
    """0.5 (logp - ref)^2."""
    return 0.5 * (logprob - ref_logprob).square()


@register_kl("k3", "low_var_kl")
def _kl_k3(logprob: torch.Tensor, ref_logprob: torch.Tensor) -> torch.Tensor:
    """exp(k) - k - 1 with k = ref - logp (Schulman's k3, low variance), clamped to [-10, 10]."""
    k = torch.clamp(ref_logprob - logprob, min=-20, max=20)
    return torch.clamp(torch.exp(k) - k - 1, min=-10, max=10)


def _straight_through(forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
                      ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """verl's ``NAME+``: the value of ``forward``, the gradient of k2.

    k1 and k3 estimate the KL's value without bias but not its gradient; k2's gradient is the KL's own.
    """
    def estimate(logprob: torch.Tensor, ref_logprob: torch.Tensor) -> torch.Tensor:
        k2 = 0.5 * (logprob - ref_logprob).square()
        return k2 - k2.detach() + forward(logprob, ref_logprob).detach()
    estimate.__doc__ = f"{(forward.__doc__ or '').rstrip('.')}, with k2's gradient (straight through)."
    return estimate


for _names, _fn in ((("k1+", "kl+"), _kl_k1), (("abs+",), _kl_abs), (("k2+", "mse+"), _kl_k2),
                    (("k3+", "low_var_kl+"), _kl_k3)):
    register_kl(*_names)(_straight_through(_fn))


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str = "low_var_kl") -> torch.Tensor:
    """Per-token KL estimate between the policy and the reference, by the registered estimator ``kl_penalty``.

    k1 ``d``; abs ``|d|``; k2/mse ``0.5 d^2`` with ``d = logp - ref``;
    k3/low_var_kl ``exp(k) - k - 1`` with ``k = clamp(ref - logp, ±20)``, clamped to [-10, 10].
    A name with ``+`` (``k3+``) has that value and k2's gradient, as in verl.
    """
    return KL_ESTIMATORS.get(kl_penalty)(logprob, ref_logprob)


def gspo_aggregated(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                    response_mask: torch.Tensor, cliprange_low: float, cliprange_high: float,
                    weights: torch.Tensor | None, mode: str) -> tuple[torch.Tensor, ...]:
    """GSPO's clipped per-token losses (each token carries its row's clipped ratio) aggregated with ``mode``:
    verl's GSPO takes each row's mean, TRL's LUSPO (:mod:`memrl.rl.sequence_losses`) each row's sum."""
    neg_kl = log_prob - old_log_prob
    lengths = response_mask.sum(dim=-1).clamp(min=1)
    seq_log_ratio = (neg_kl * response_mask).sum(dim=-1) / lengths
    log_ratio = torch.clamp(log_prob - log_prob.detach() + seq_log_ratio.detach().unsqueeze(-1), max=10.0)
    ratio = torch.exp(log_ratio)
    l1 = -advantages * ratio
    l2 = -advantages * torch.clamp(ratio, 1 - cliprange_low, 1 + cliprange_high)
    losses = torch.maximum(l1, l2)
    if weights is not None:
        losses = losses * weights
    loss = agg_loss(losses, response_mask, mode)
    clipfrac = masked_mean(torch.gt(l2, l1).float(), response_mask)
    return loss, clipfrac, masked_mean(-neg_kl, response_mask), torch.zeros((), device=loss.device)
