"""What every policy loss shares: the :class:`PolicyLoss` record, its registration and lookup by name.

Why a module of its own: the built-in losses live in several modules (:mod:`memrl.rl.policy_losses`,
:mod:`memrl.rl.divergence_losses`, :mod:`memrl.rl.covariance_losses`) that all register here, and the registry
imports them through :mod:`memrl.rl.policy_losses`; with the decorator below them there is no import cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from memrl.config.registry import POLICY_LOSSES, origin
from memrl.plugins import call_mismatch

# (loss, clipfrac, ppo_kl, clipfrac_lower), as memrl.rl.losses.compute_policy_loss returns them
LossOut = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class PolicyLoss:
    """A registered policy loss: ``fn(old_log_prob, log_prob, advantages, response_mask, *, cliprange_low,
    cliprange_high, clip_ratio_c, loss_agg_mode, norm_length, weights) -> LossOut``; ``aggregation``: the
    loss_agg_mode it always uses (None: the configured one)."""

    fn: Callable[..., LossOut]
    aggregation: str | None = None
    options: tuple[str, ...] = ()  # further ``algorithm`` fields it reads, passed as keywords of the same name
    required: tuple[str, ...] = ()  # those of ``options`` that have no default (the config refuses None)
    dual_clip: bool = True  # reads clip_ratio_c (False: the config refuses a clip_ratio_c set with it)
    # each token's loss, and its gradient, is 0 where its advantage is 0 (algorithm.top_entropy_quantile masks
    # tokens that way; not gspo: its one ratio per row spreads a masked token's gradient over the row in TRL)
    token_linear: bool = False
    # a row whose advantages are all 0 adds 0, gradient included, and leaves the other rows' alone (token_linear
    # losses, and gspo / luspo): algorithm.off_policy_mask_threshold drops a row by zeroing its advantages
    row_linear: bool = False
    # the importance ratio is one per row (gspo, luspo: TRL's importance_sampling_level="sequence"); what
    # algorithm.kl_bias_correction weights the KL with
    sequence_ratio: bool = False
    # it reads the rollout correction's weights token by token (vespo folds them into its sequence weight), so
    # sequence-level weights are refused
    token_weights_only: bool = False
    clip_range: bool = True  # reads clip_ratio_low / clip_ratio_high (False: the config refuses them set with it)

    @property
    def zeroes_rows(self) -> bool:
        """Whether zeroing a row's advantages removes exactly that row from the loss."""
        return self.token_linear or self.row_linear

    def __call__(self, *args: torch.Tensor, **kw: object) -> LossOut:
        name = origin(self.fn, ":")
        wrong = call_mismatch(self.fn, *args, **kw)
        if wrong:
            raise TypeError(f"policy loss {name}: {wrong}; a policy loss takes (old_log_prob, log_prob, advantages, "
                            f"response_mask, *, {', '.join(kw)}) (or **kwargs)")
        out = self.fn(*args, **kw)
        if not isinstance(out, tuple) or len(out) != 4 or not isinstance(out[0], torch.Tensor):
            got = f"a {len(out)}-tuple" if isinstance(out, tuple) else type(out).__name__
            raise ValueError(f"policy loss {name} returned {got}; it must return (loss tensor, clipfrac, ppo_kl, "
                             "clipfrac_lower)")
        loss, *stats = out
        return (loss, *(torch.as_tensor(x, dtype=torch.float32, device=loss.device) for x in stats))  # type: ignore[return-value]


def register_policy_loss(name: str, *, aggregation: str | None = None, options: tuple[str, ...] = (),
                         required: tuple[str, ...] = (), dual_clip: bool = True, token_linear: bool = False,
                         row_linear: bool = False, sequence_ratio: bool = False,
                         token_weights_only: bool = False, clip_range: bool = True) -> Callable[[Callable[..., LossOut]], PolicyLoss]:
    """Decorator: register a policy loss as ``algorithm.policy_loss=name`` (``options``: the ``algorithm``
    fields it reads beyond the clip settings; ``required``: those of them the user must set; ``dual_clip``:
    whether it reads ``clip_ratio_c``, which every loss is passed; ``token_linear``: a token whose advantage
    is 0 adds 0 to the loss, so ``top_entropy_quantile`` can mask tokens by zeroing theirs; ``row_linear``: the
    same for a whole row, so ``off_policy_mask_threshold`` can drop rows; ``sequence_ratio``: one importance ratio
    per row; ``token_weights_only``: the rollout correction's weights must be per token; ``clip_range``: whether it
    reads clip_ratio_low / clip_ratio_high)."""
    def decorate(fn: Callable[..., LossOut]) -> PolicyLoss:
        return POLICY_LOSSES.register(name, PolicyLoss(fn, aggregation, options, required, dual_clip, token_linear,
                                                       row_linear, sequence_ratio, token_weights_only, clip_range))
    return decorate


def policy_loss(name: str) -> PolicyLoss:
    """The loss ``name`` selects; a plain function given by import path uses the configured aggregation."""
    obj = POLICY_LOSSES.get(name)
    return obj if isinstance(obj, PolicyLoss) else PolicyLoss(obj)
