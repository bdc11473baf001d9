"""Tinker's built-in ``forward_backward`` losses, one datum at a time, as pure tensor functions.

A Tinker client sends each training example as a ``Datum``: the model input, and in
``loss_fn_inputs`` the tensors the named loss reads, all aligned with the target positions. The
server computes the log-probability of each target token under the current weights
(``target_logprobs``, with gradient) and hands it here with the datum's tensors; the value returned
is the datum's **sum-reduced** loss, exactly as Tinker defines it (the Tinker docs' loss pages and
tinker-cookbook's ``tutorials/202_loss_functions.py``), so a script tuned against Tinker sees the
same ``loss:sum`` and the same gradient. With ``p`` = ``target_logprobs``, ``q`` = the sampler's
``logprobs``, ``A`` = ``advantages``, ``r = exp(p - q)``:

* ``cross_entropy``: ``-(weights * p).sum()``;
* ``importance_sampling``: ``-(r * A).sum()`` (REINFORCE with the sampler's importance ratio);
* ``ppo``: ``-min(r * A, clip(r, lo, hi) * A).sum()``, ``lo, hi`` = ``clip_low_threshold``,
  ``clip_high_threshold`` (defaults 0.8, 1.2);
* ``cispo``: ``-(sg(clip(r, lo, hi)) * p * A).sum()`` (defaults 0.0, 4.0: a one-sided cap);
* ``dro``: ``-(p * A - beta / 2 * (p - q) ** 2).sum()``, ``beta`` from ``loss_fn_config`` (0.05 when
  omitted: the value of Tinker's DRO page example; the service's own default is not published).

The thresholds come from ``loss_fn_config`` or, per token, from ``loss_fn_inputs`` (the SDK
declares both keys there as float32 tensors); giving one in both places is refused. Keys of
``loss_fn_inputs`` a loss does not read (the cookbook's ``mask``, say) are ignored, as they carry
nothing the loss needs.

Positions whose advantage is 0 contribute exactly 0 to the RL losses; their log-ratio is zeroed
before ``exp`` so an extreme ``q`` there cannot turn ``0 * inf`` into a NaN loss or gradient. DRO's
penalty is the exception: it applies wherever ``q`` is a sampler's log-prob, a completion token of a
constant-reward group (A = 0) included, and only the prompt's padding (A = 0 and q = 0: the cookbook
pads ``q`` with 0 there, and ``(p - 0) ** 2`` would pull every prompt token's probability towards 1)
is left out. Elsewhere the formulas are
applied as written, with no clamping, since clamping would change the numbers Tinker returns.

Metric keys carry the reduction the Tinker SDK uses to merge results across chunks of a batch
(``name:sum``, ``name:max``): ``loss:sum`` for every loss, ``weights:sum`` for ``cross_entropy``,
``tokens:sum`` (positions with a nonzero advantage) and ``ratio:max`` for the RL losses, and
``clipped:sum`` (positions where a clip bound was active) for ``ppo`` and ``cispo``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch


class UnsupportedLoss(ValueError):
    """A ``loss_fn`` Tinker names that this server does not compute, with the reason in the message."""


LOSSES: tuple[str, ...] = ("cross_entropy", "importance_sampling", "ppo", "cispo", "dro")

# Tinker's other built-in names, refused in one line each: the reason says what is missing.
REFUSED: dict[str, str] = {
    "gspo": "Tinker's loss page gives GSPO-token's formula (one ratio per sequence over sequence_ratio_mask) "
            "but not its default clip thresholds nor the meaning of an omitted mask, so its numbers cannot be "
            "matched; pass loss_fn='importance_sampling' (cookbook rl_loop: loss_fn=importance_sampling), or "
            "'ppo'/'cispo' with clip thresholds in loss_fn_config",
    "stable_reinforce": "its objective is not published (it reads stability records Tinker keeps at sampling "
                        "time); pass loss_fn='importance_sampling', the same REINFORCE with the sampler's "
                        "importance ratio (cookbook rl_loop and rl.train: loss_fn=importance_sampling), or 'cispo'",
    "custom": "custom loss graphs are not supported; forward_backward_custom runs on the client "
              "and needs only cross_entropy here",
}

# Tinker's defaults (tinker-cookbook tutorials/202_loss_functions.py: "PPO defaults to 0.8 and 1.2"; the
# docs' CISPO page: "CISPO defaults to disabling the lower bound ... (clip_low_threshold=0.0, clip_high_threshold=4.0)").
CLIP_DEFAULTS: dict[str, tuple[float, float]] = {"ppo": (0.8, 1.2), "cispo": (0.0, 4.0)}
CLIP_KEYS: tuple[str, str] = ("clip_low_threshold", "clip_high_threshold")

INPUTS: dict[str, tuple[str, ...]] = {
    "cross_entropy": ("target_tokens", "weights"),
    "importance_sampling": ("target_tokens", "logprobs", "advantages"),
    "ppo": ("target_tokens", "logprobs", "advantages"),
    "cispo": ("target_tokens", "logprobs", "advantages"),
    "dro": ("target_tokens", "logprobs", "advantages"),
}
DRO_BETA = 0.05

Metrics = dict[str, float]


def _check_name(loss_fn: str) -> None:
    """Refuse a loss this module does not compute, naming what it does compute."""
    if loss_fn in LOSSES:
        return
    supported = ", ".join(LOSSES)
    if loss_fn in REFUSED:
        raise UnsupportedLoss(f"loss_fn {loss_fn!r} is not supported: {REFUSED[loss_fn]} (supported: {supported})")
    raise UnsupportedLoss(f"unknown loss_fn {loss_fn!r} (supported: {supported})")


def _inputs(loss_fn: str, target_logprobs: torch.Tensor,
            loss_fn_inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The loss's tensors, checked for presence and shape, cast to ``target_logprobs``'s dtype and device.

    A shape mismatch is refused rather than broadcast: a datum whose advantages are one short of its
    targets is a client bug that broadcasting would hide.
    """
    missing = [k for k in INPUTS[loss_fn] if k not in loss_fn_inputs]
    if missing:
        raise ValueError(f"loss_fn {loss_fn!r} needs loss_fn_inputs {', '.join(INPUTS[loss_fn])}; "
                         f"missing: {', '.join(missing)}")
    out: dict[str, torch.Tensor] = {}
    for key in INPUTS[loss_fn]:
        value = torch.as_tensor(loss_fn_inputs[key])
        if value.shape != target_logprobs.shape:
            raise ValueError(f"loss_fn_inputs[{key!r}] has shape {tuple(value.shape)}, expected "
                             f"{tuple(target_logprobs.shape)} like the target tokens' log-probs")
        if key != "target_tokens":
            value = value.to(device=target_logprobs.device, dtype=target_logprobs.dtype)
        out[key] = value
    return out


def _number(key: str, value: object) -> float:
    """A config value as a finite float; the SDK lets ``loss_fn_config`` values be strings too."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"loss_fn_config[{key!r}] must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"loss_fn_config[{key!r}] must be finite, got {value!r}")
    return number


def _check_config(loss_fn: str, config: Mapping[str, object]) -> None:
    """Refuse config keys the loss does not read: a misspelt threshold must not fall back to the default."""
    allowed = CLIP_KEYS if loss_fn in CLIP_DEFAULTS else ("beta",) if loss_fn == "dro" else ()
    unknown = sorted(set(config) - set(allowed))
    if unknown:
        takes = f"takes only {', '.join(allowed)}" if allowed else "takes no loss_fn_config"
        raise ValueError(f"loss_fn {loss_fn!r} {takes}; got {', '.join(unknown)}")


def clip_bounds(loss_fn: str, target_logprobs: torch.Tensor, loss_fn_inputs: Mapping[str, torch.Tensor],
                config: Mapping[str, object]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(low, high)`` for ``ppo``/``cispo``: per-token inputs, else ``loss_fn_config``, else Tinker's defaults.

    Bounds are kept as tensors so a per-token threshold and a scalar one go through the same code.
    ``0 <= low <= high`` is required: a negative lower bound is meaningless for a ratio, and
    ``low > high`` would make ``clamp`` return ``high`` everywhere without saying so.
    """
    bounds = []
    for key, default in zip(CLIP_KEYS, CLIP_DEFAULTS[loss_fn]):
        if key in loss_fn_inputs and key in config:
            raise ValueError(f"{key} is given both in loss_fn_config and in loss_fn_inputs; give it once")
        if key in loss_fn_inputs:
            value = torch.as_tensor(loss_fn_inputs[key]).to(target_logprobs.device, target_logprobs.dtype)
            if value.dim() and value.shape != target_logprobs.shape:
                raise ValueError(f"loss_fn_inputs[{key!r}] has shape {tuple(value.shape)}, expected a scalar "
                                 f"or {tuple(target_logprobs.shape)}")
        else:
            number = _number(key, config[key]) if key in config else default
            value = torch.tensor(number, device=target_logprobs.device, dtype=target_logprobs.dtype)
        bounds.append(value.detach())
    low, high = bounds
    if bool((low < 0).any()) or bool((low > high).any()):
        raise ValueError(f"clip thresholds need 0 <= clip_low_threshold <= clip_high_threshold; got low "
                         f"{low.tolist()}, high {high.tolist()}")
    return low, high


def _log_ratio(target_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor,
               active: torch.Tensor) -> torch.Tensor:
    """``p - q`` where the advantage is nonzero, 0 elsewhere (so ``exp`` stays finite where it is multiplied by 0)."""
    return torch.where(active, target_logprobs - sampler_logprobs, torch.zeros_like(target_logprobs))


def _rl_metrics(loss: torch.Tensor, ratio: torch.Tensor, active: torch.Tensor) -> Metrics:
    """The metrics every RL loss reports: the loss, the trained positions, the largest ratio among them."""
    ratio_max = float(ratio.detach()[active].max()) if bool(active.any()) else 1.0
    return {"loss:sum": float(loss.detach()), "tokens:sum": float(active.sum()), "ratio:max": ratio_max}


def cross_entropy(target_logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, Metrics]:
    """``-(weights * p).sum()``: supervised learning, the weights masking the prompt out (or weighing tokens)."""
    weights = inputs["weights"]
    loss = -(weights * target_logprobs).sum()
    return loss, {"loss:sum": float(loss.detach()), "weights:sum": float(weights.sum())}


def importance_sampling(target_logprobs: torch.Tensor,
                        inputs: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, Metrics]:
    """``-(exp(p - q) * A).sum()``: its gradient is ``-A * r * grad p``, REINFORCE corrected for the sampler."""
    advantages = inputs["advantages"]
    active = advantages != 0
    ratio = torch.exp(_log_ratio(target_logprobs, inputs["logprobs"], active))
    loss = -(ratio * advantages).sum()
    return loss, _rl_metrics(loss, ratio, active)


def ppo(target_logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor], low: torch.Tensor,
        high: torch.Tensor) -> tuple[torch.Tensor, Metrics]:
    """``-min(r A, clip(r, low, high) A).sum()``: the clipped surrogate, per token, against the sampler.

    The bounds are ratios (0.8, 1.2), not PPO's epsilons; no dual clip (Tinker's formula has none).
    """
    advantages = inputs["advantages"]
    active = advantages != 0
    ratio = torch.exp(_log_ratio(target_logprobs, inputs["logprobs"], active))
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, low, high) * advantages
    loss = -torch.minimum(unclipped, clipped).sum()
    metrics = _rl_metrics(loss, ratio, active)
    metrics["clipped:sum"] = float(((clipped < unclipped) & active).sum())
    return loss, metrics


def cispo(target_logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor], low: torch.Tensor,
          high: torch.Tensor) -> tuple[torch.Tensor, Metrics]:
    """``-(sg(clip(r, low, high)) * p * A).sum()``: the clipped ratio only scales each token's gradient.

    Unlike PPO, a clipped token keeps its gradient (bounded by the cap) instead of losing it.
    """
    advantages = inputs["advantages"]
    active = advantages != 0
    ratio = torch.exp(_log_ratio(target_logprobs, inputs["logprobs"], active)).detach()
    coef = torch.clamp(ratio, low, high)
    loss = -(coef * target_logprobs * advantages).sum()
    metrics = _rl_metrics(loss, ratio, active)
    metrics["clipped:sum"] = float(((coef != ratio) & active).sum())
    return loss, metrics


def dro(target_logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor],
        beta: float) -> tuple[torch.Tensor, Metrics]:
    """``-(p A - beta/2 (p - q)^2).sum()``: REINFORCE on the log-prob with a quadratic pull towards the sampler."""
    advantages, sampler = inputs["advantages"], inputs["logprobs"]
    # the penalty applies wherever q is the sampler's (a completion token of a constant-reward group has A = 0
    # and a real q: the cookbook trains such groups by default); only the prompt's padding (A = 0, q = 0) is out
    penalised = (advantages != 0) | (sampler != 0)
    log_ratio = _log_ratio(target_logprobs, sampler, penalised)
    loss = -(target_logprobs * advantages - 0.5 * beta * log_ratio.square()).sum()
    return loss, _rl_metrics(loss, torch.exp(log_ratio.detach()), advantages != 0)


def tinker_loss(loss_fn: str, target_logprobs: torch.Tensor, loss_fn_inputs: dict[str, torch.Tensor],
                config: dict | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """One datum's sum-reduced loss under Tinker's ``loss_fn`` and its metrics (``name:reduction`` keys).

    ``target_logprobs``: the log-prob of each of ``loss_fn_inputs["target_tokens"]`` under the current
    weights, with gradient (``[T]``, or ``[T, K]`` for several targets per position, as the cookbook's
    top-k distillation sends to ``cross_entropy``). ``config`` is the request's ``loss_fn_config``.
    Raises :class:`UnsupportedLoss` for a loss not in :data:`LOSSES`, ``ValueError`` for missing or
    misshapen inputs and unknown or invalid config keys.
    """
    _check_name(loss_fn)
    config = dict(config or {})
    _check_config(loss_fn, config)
    inputs = _inputs(loss_fn, target_logprobs, loss_fn_inputs)
    if loss_fn == "cross_entropy":
        return cross_entropy(target_logprobs, inputs)
    if loss_fn == "importance_sampling":
        return importance_sampling(target_logprobs, inputs)
    if loss_fn == "dro":
        beta = _number("beta", config["beta"]) if "beta" in config else DRO_BETA
        if beta < 0:
            raise ValueError(f"loss_fn_config['beta'] must be >= 0, got {beta}")
        return dro(target_logprobs, inputs, beta)
    low, high = clip_bounds(loss_fn, target_logprobs, loss_fn_inputs, config)
    return (ppo if loss_fn == "ppo" else cispo)(target_logprobs, inputs, low, high)
