"""Policy-gradient losses selectable by ``algorithm.policy_loss``: verl's vanilla, gspo, cispo, sapo, geo_mean, gpg;
dppo_tv, dppo_kl and dro in :mod:`memrl.rl.divergence_losses`, clip_cov and kl_cov in :mod:`memrl.rl.covariance_losses`,
TRL's luspo and vespo in :mod:`memrl.rl.sequence_losses`.

Why a choice: the token-level PPO surrogate (``vanilla``) is what GRPO papers use, but two successors are now common
in verl recipes. GSPO (Qwen, arXiv 2507.18671) clips one importance ratio per *sequence*, the geometric mean of its
token ratios, which keeps long responses from being dominated by a few tokens whose ratio strays; CISPO (MiniMax-M1,
arXiv 2506.13585) never drops a token's gradient: it clips the ratio, stops its gradient, and weights the REINFORCE
term ``A * log pi`` by it.

SAPO (Qwen) replaces the clip by a smooth gate; GMPO (``geo_mean``) takes the geometric mean of the token ratios;
GPG is REINFORCE without a ratio. Each loss follows ``verl/trainer/ppo/core_algos.py``
(``compute_policy_loss_<name>``) step for step, so the numbers are verl's (``tests/rl/test_policy_losses.py`` runs
verl's own functions from a checkout). Every loss takes ``weights``: per-token factors applied to the loss matrix
before aggregation, verl's ``rollout_is_weights`` (the rollout correction's decoupled mode).

A loss may fix its aggregation (``PolicyLoss.aggregation``): GSPO and SAPO are always ``seq-mean-token-mean`` in
verl and GMPO a mean over rows, whatever ``loss_agg_mode`` says; memrl makes the config say so (:mod:`memrl.config.algorithm`).
"""

from __future__ import annotations

import torch

from memrl.config.registry import POLICY_LOSSES
from memrl.rl.functional import masked_mean
from memrl.rl.losses import agg_loss, gspo_aggregated
from memrl.rl.policy_loss_base import LossOut, PolicyLoss, policy_loss, register_policy_loss  # noqa: F401
from memrl.rl.rollout_loss import weighted_policy_loss


@register_policy_loss("vanilla", token_linear=True)
def vanilla_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                 response_mask: torch.Tensor, *, cliprange_low: float = 0.2, cliprange_high: float = 0.2,
                 clip_ratio_c: float = 3.0, loss_agg_mode: str = "token-mean", norm_length: int | None = None,
                 weights: torch.Tensor | None = None) -> LossOut:
    """Token-level PPO clip with clip-higher and the dual clip (verl's default).

    The rollout correction's weighted PPO (:func:`memrl.rl.rollout_loss.weighted_policy_loss`): each token's
    loss times its weight, otherwise the steps of :func:`memrl.rl.losses.compute_policy_loss`."""
    loss, stats = weighted_policy_loss(log_prob, old_log_prob, advantages, response_mask, weights,
                                       cliprange_low=cliprange_low, cliprange_high=cliprange_high,
                                       clip_ratio_c=clip_ratio_c, loss_agg_mode=loss_agg_mode, norm_length=norm_length)
    return loss, stats["clipfrac"], stats["ppo_kl"], stats["clipfrac_lower"]


@register_policy_loss("gspo", aggregation="seq-mean-token-mean", dual_clip=False, row_linear=True,
                      sequence_ratio=True)
def gspo_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
              response_mask: torch.Tensor, *, cliprange_low: float = 0.2, cliprange_high: float = 0.2,
              clip_ratio_c: float = 3.0, loss_agg_mode: str = "seq-mean-token-mean", norm_length: int | None = None,
              weights: torch.Tensor | None = None) -> LossOut:
    """GSPO (Qwen): one clipped importance ratio per sequence, the geometric mean of its token ratios.

    ``s = exp(mean_t log(pi / pi_old))``, clipped to ``[1 - low, 1 + high]``.

    Per token the ratio is ``sg(s) * pi_t / sg(pi_t)``, so the value is the sequence's and the gradient flows
    through each token's log-prob (GSPO-token). The log-ratio is clamped above at 10; there is no dual clip
    (``clip_ratio_c`` is unused) and ``clipfrac_lower`` is 0, as in verl."""
    return gspo_aggregated(old_log_prob, log_prob, advantages, response_mask, cliprange_low, cliprange_high,
                           weights, "seq-mean-token-mean")


@register_policy_loss("cispo", dual_clip=False, token_linear=True)
def cispo_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
               response_mask: torch.Tensor, *, cliprange_low: float = 0.2, cliprange_high: float = 0.2,
               clip_ratio_c: float = 3.0, loss_agg_mode: str = "token-mean", norm_length: int | None = None,
               weights: torch.Tensor | None = None) -> LossOut:
    """CISPO (MiniMax-M1): REINFORCE weighted by the clipped, stop-gradient token ratio.

    ``-sg(clip(r, 1 - low, 1 + high)) * A * log pi`` per token, ``r = exp(log pi - log pi_old)``.

    Every token keeps a gradient (none is zeroed by the clip); ``clipfrac`` counts the tokens whose ratio the clip
    changed. The log-ratio is clamped to +-20 before ``exp``; no dual clip, ``clipfrac_lower`` 0."""
    neg_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(neg_kl)
    clipped = torch.clamp(ratio, 1 - cliprange_low, 1 + cliprange_high)
    losses = -clipped.detach() * advantages * log_prob
    if weights is not None:
        losses = losses * weights
    loss = agg_loss(losses, response_mask, loss_agg_mode, norm_length)
    clipfrac = masked_mean((ratio != clipped).float(), response_mask)
    return loss, clipfrac, masked_mean(-neg_kl, response_mask), torch.zeros((), device=loss.device)


@register_policy_loss("sapo", aggregation="seq-mean-token-mean", options=("sapo_tau_pos", "sapo_tau_neg"),
                      dual_clip=False, token_linear=True, clip_range=False)
def sapo_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
              response_mask: torch.Tensor, *, cliprange_low: float = 0.2, cliprange_high: float = 0.2,
              clip_ratio_c: float = 3.0, loss_agg_mode: str = "seq-mean-token-mean", norm_length: int | None = None,
              weights: torch.Tensor | None = None, sapo_tau_pos: float = 1.0, sapo_tau_neg: float = 1.05) -> LossOut:
    """SAPO (Qwen): a smooth gate of the token ratio instead of a hard clip.

    Each token's ``-A`` is weighted by ``sigmoid(tau (r - 1)) * 4 / tau``, with ``tau`` = ``sapo_tau_pos`` where A >
    0, else ``sapo_tau_neg`` (arXiv 2511.20347). Its gradient, ``A r sigma'(...) * 4``, peaks at r = 1 and fades as
    r strays, where PPO's would stop at the clip edge. Aggregated per sequence; ``clipfrac`` and ``clipfrac_lower``
    are 0."""
    neg_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(neg_kl)
    pos = torch.as_tensor(sapo_tau_pos, dtype=advantages.dtype, device=advantages.device)
    neg = torch.as_tensor(sapo_tau_neg, dtype=advantages.dtype, device=advantages.device)
    tau = torch.where(advantages > 0, pos, neg)
    losses = -(torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)) * advantages
    if weights is not None:
        losses = losses * weights
    loss = agg_loss(losses, response_mask, "seq-mean-token-mean")
    zero = torch.zeros((), device=loss.device)
    return loss, zero, masked_mean(-neg_kl, response_mask), zero.clone()


@register_policy_loss("geo_mean", aggregation="seq-mean-token-mean", dual_clip=False)
def geo_mean_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                  response_mask: torch.Tensor, *, cliprange_low: float = 0.2, cliprange_high: float = 0.2,
                  clip_ratio_c: float = 3.0, loss_agg_mode: str = "seq-mean-token-mean", norm_length: int | None = None,
                  weights: torch.Tensor | None = None) -> LossOut:
    """GMPO: the geometric mean of a row's clipped token ratios, one loss per row.

    Each token's log-ratio is first clipped to ``[-low, high]`` on the side its advantage sign makes pessimistic;
    ``-A_row * ratio`` per row, mean over rows (arXiv 2507.20673). ``A_row`` is the row's mean advantage (sequence-
    level advantages, as verl supports); token weights enter as their geometric mean over the row.
    ``clipfrac``/``clipfrac_lower``: clipped tokens with A > 0 / < 0."""
    neg_kl = log_prob - old_log_prob
    sign = torch.sign(advantages)
    clamped = torch.clamp(neg_kl, -cliprange_low, cliprange_high)
    pessimistic = sign * torch.min(sign * neg_kl, sign * clamped)
    count = response_mask.sum(dim=-1)
    ratio = torch.exp((pessimistic * response_mask).sum(dim=-1) / (count + 1e-8))
    row_adv = (advantages * response_mask).sum(dim=-1) / (count + 1e-8)
    losses = -row_adv * ratio
    if weights is not None:
        losses = losses * torch.exp((torch.log(weights + 1e-10) * response_mask).sum(dim=-1) / (count + 1e-8))
    clipped = torch.ne(neg_kl, clamped)
    return (losses.mean(), masked_mean((clipped * (advantages > 0)).float(), response_mask),
            masked_mean(-neg_kl, response_mask), masked_mean((clipped * (advantages < 0)).float(), response_mask))


@register_policy_loss("gpg", dual_clip=False, token_linear=True, clip_range=False)
def gpg_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
             response_mask: torch.Tensor, *, cliprange_low: float = 0.2, cliprange_high: float = 0.2,
             clip_ratio_c: float = 3.0, loss_agg_mode: str = "token-mean", norm_length: int | None = None,
             weights: torch.Tensor | None = None) -> LossOut:
    """GPG: plain REINFORCE, ``-A log pi`` per token, no ratio and no clip.

    One update per batch is what it assumes (arXiv 2504.02546). verl reports no clip numbers for it: 0 here, and
    ``ppo_kl`` from the log-probs."""
    losses = -log_prob * advantages
    if weights is not None:
        losses = losses * weights
    loss = agg_loss(losses, response_mask, loss_agg_mode, norm_length)
    zero = torch.zeros((), device=loss.device)
    return loss, zero, masked_mean(old_log_prob - log_prob.detach(), response_mask), zero.clone()


# The other built-ins register on import; after this module's own, so that names list vanilla first.
from memrl.rl import covariance_losses, divergence_losses, sequence_losses  # noqa: E402,F401

POLICY_LOSS_NAMES: tuple[str, ...] = POLICY_LOSSES.names  # the built-ins (plug-ins may add more)
