"""``algorithm.rollout_correction``: verl 0.9's rollout-correction options, validated when the config loads.

The names and meanings are verl's ``RolloutCorrectionConfig`` (``rollout_is``,
``rollout_is_threshold``, ``rollout_is_batch_normalize``, ``rollout_rs``, ``rollout_rs_threshold``,
``bypass_mode``, ``loss_type``), so a verl recipe's values carry over unchanged; memrl adds
``episode_rejection`` (the conversation level, :mod:`memrl.rl.rollout_corr`). The threshold
parsers live here so a bad threshold fails at load time, naming the key, instead of at step 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field, field_validator, model_validator

from memrl.config.section import Section

IS_LEVELS = ("token", "sequence")


RS_OPTIONS: tuple[str, ...] = (
    "token_k1", "token_k2", "token_k3",
    "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
    "seq_mean_k1", "seq_mean_k2", "seq_mean_k3",
    "seq_max_k2", "seq_max_k3",
)


@dataclass(frozen=True)
class RsBound:
    """One option's bounds: ``lower`` only for ``*_k1`` (a ratio), ``upper`` always."""

    lower: float | None
    upper: float


def parse_rs_options(rollout_rs: str) -> list[str]:
    """``"token_k1, seq_mean_k3"`` -> the distinct options in order; an unknown name is refused."""
    if not isinstance(rollout_rs, str):
        raise ValueError("rollout_rs must be a non-empty string (comma separated for multiple options)")
    names = [opt.strip() for opt in rollout_rs.split(",") if opt.strip()]
    if not names:
        raise ValueError("rollout_rs must name at least one option")
    for name in names:
        if name not in RS_OPTIONS:
            raise ValueError(f"rollout_rs: unknown option {name!r}; choose from {', '.join(RS_OPTIONS)}")
    return list(dict.fromkeys(names))


def _one_bound(option: str, spec: str) -> RsBound:
    if option.endswith("k1"):
        lower_s, upper_s = spec.split("_", 1) if "_" in spec else (str(1.0 / float(spec)), spec)
        try:
            lower, upper = float(lower_s), float(upper_s)
        except ValueError:
            raise ValueError(f"rollout_rs_threshold: {spec!r} is not a number for option {option!r}") from None
        if lower <= 0 or upper <= 0 or lower > upper:
            raise ValueError(f"rollout_rs_threshold for {option!r} must be 0 < lower <= upper, got {spec!r}")
        return RsBound(lower, upper)
    if "_" in spec:
        raise ValueError(f"rollout_rs_threshold for {option!r} takes one upper bound (no '_'), got {spec!r}")
    try:
        upper = float(spec)
    except ValueError:
        raise ValueError(f"rollout_rs_threshold: {spec!r} is not a number for option {option!r}") from None
    if upper <= 0:
        raise ValueError(f"rollout_rs_threshold for {option!r} must be positive, got {spec!r}")
    return RsBound(None, upper)


def parse_rs_thresholds(options: list[str], spec: str | float | None) -> dict[str, RsBound]:
    """One bound per option from ``"0.5_2.0,0.01"``; a single entry is shared by every option."""
    if spec is None:
        raise ValueError("rollout_rs_threshold is required when rollout_rs is set")
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise TypeError("rollout_rs_threshold must be a number or a string of comma-separated thresholds")
    parts = [str(spec)] if not isinstance(spec, str) else [p.strip() for p in spec.split(",") if p.strip()]
    if not parts:
        raise ValueError("rollout_rs_threshold must hold at least one threshold")
    if len(parts) not in (1, len(options)):
        raise ValueError(f"rollout_rs_threshold: give one threshold for all options or exactly {len(options)} "
                         f"(one per rollout_rs option), got {len(parts)}")
    parts = parts * len(options) if len(parts) == 1 else parts
    return {opt: _one_bound(opt, part) for opt, part in zip(options, parts)}



def parse_is_threshold(spec: str | float) -> tuple[float, float | None]:
    """``2.0`` -> (2.0, None) (TIS); ``"0.5_5.0"`` -> (5.0, 0.5) (IcePop)."""
    if isinstance(spec, bool):
        raise TypeError("rollout_is_threshold must be a number or a 'lower_upper' string, not a boolean")
    if isinstance(spec, (int, float)):
        upper, lower = float(spec), None
    elif isinstance(spec, str):
        text = spec.strip()
        if not text:
            raise ValueError("rollout_is_threshold must not be empty")
        try:
            if "_" in text:
                low_s, up_s = text.split("_", 1)
                upper, lower = float(up_s), float(low_s)
            else:
                upper, lower = float(text), None
        except ValueError:
            raise ValueError(f"rollout_is_threshold {spec!r} is neither a number nor 'lower_upper'") from None
    else:
        raise TypeError("rollout_is_threshold must be a number or a 'lower_upper' string")
    if upper <= 0:
        raise ValueError(f"rollout_is_threshold: the upper bound must be positive, got {upper}")
    if lower is not None and not 0 < lower <= upper:
        raise ValueError(f"rollout_is_threshold: need 0 < lower <= upper, got {spec!r}")
    return upper, lower


class RolloutCorrectionConfig(Section):
    """Importance weights and rejection on the trainer/engine log-ratio (all off by default)."""

    rollout_is: Literal["token", "sequence"] | None = Field(
        None, description="Importance weights pi_train/pi_engine per token or per sequence (= per conversation: "
        "a row is one conversation); null: none.")
    rollout_is_threshold: str | float = Field(
        2.0, description="A number truncates the weights at it (TIS); 'lower_upper' (e.g. '0.5_5.0') zeroes "
        "weights outside the band (IcePop).")
    rollout_is_batch_normalize: bool = Field(False, description="Rescale the weights to mean 1 over the batch.")
    rollout_rs: str | None = Field(
        None, description="Rejection options, comma-chained: token_k1/k2/k3, seq_sum_k1/k2/k3, seq_mean_k1/k2/k3 "
        "(seq_mean_k1 = geometric-mean ratio), seq_max_k2/k3; null: none.")
    rollout_rs_threshold: str | float | None = Field(
        None, description="One threshold per rollout_rs option (comma-separated) or one for all; k1 options "
        "take 'lower_upper' ratio bounds (one number u means [1/u, u]).")
    bypass_mode: bool = Field(
        False, description="Use the engine's log-probs as the old policy (no recomputation pass): PPO clips "
        "against the engine (loss_type ppo_clip) or REINFORCE with the IS weights (loss_type reinforce).")
    loss_type: Literal["ppo_clip", "reinforce"] = Field("ppo_clip", description="bypass_mode's policy loss.")
    episode_rejection: Literal["any"] | float | None = Field(
        None, description="memrl's conversation level: reject a whole episode when any of its conversations "
        "(or at least this fraction of them) was rejected by rollout_rs; null: rows judged alone (verl).")

    @field_validator("rollout_is_threshold")
    @classmethod
    def _is_threshold(cls, value: str | float) -> str | float:
        parse_is_threshold(value)
        return value

    @field_validator("episode_rejection")
    @classmethod
    def _fraction(cls, value: str | float | None) -> str | float | None:
        if isinstance(value, float) and not 0 < value <= 1:
            raise ValueError(f"a fraction must be in (0, 1], got {value}")
        return value

    @model_validator(mode="after")
    def _rejection(self) -> "RolloutCorrectionConfig":
        if self.rollout_rs is not None:
            parse_rs_thresholds(parse_rs_options(self.rollout_rs), self.rollout_rs_threshold)
        elif self.episode_rejection is not None:
            raise ValueError("episode_rejection needs rollout_rs (it widens rollout_rs's rejections to episodes)")
        return self

    @property
    def enabled(self) -> bool:
        """Whether any weight, rejection or bypass is on (else the update runs as without the section)."""
        return self.rollout_is is not None or self.rollout_rs is not None or self.bypass_mode
