"""verl 0.9's own policy-loss functions, run from a checkout (``MEMRL_VERL_REPO``) with their imports stubbed.

verl is not a dependency: its ``agg_loss`` and ``compute_policy_loss_<name>`` are cut out of
``verl/trainer/ppo/core_algos.py`` (a work tree, or tag v0.9.0 of a git directory) and executed beside
``masked_sum``/``masked_mean`` from its ``torch_functional.py``; the stub config carries the fields they read.
"""

from __future__ import annotations

import subprocess
import types
from pathlib import Path
from typing import Any, Optional

import torch


def verl_source(repo: str, rel: str) -> str:
    """A file of verl at ``repo``: from the work tree, else from tag v0.9.0 of a bare mirror."""
    path = Path(repo) / rel
    if path.is_file():
        return path.read_text(encoding="utf-8")
    return subprocess.run(["git", "-C", repo, "show", f"v0.9.0:{rel}"], capture_output=True, text=True,
                          check=True).stdout


def top_level_block(code: str, start: str) -> str:
    """The top-level block of ``code`` beginning at ``start``, up to the next top-level decorator or def."""
    i = code.index(start)
    body = code.index("def ", i) + 4  # past the block's own def (after its decorator, if any)
    ends = [j for j in (code.find("\n@", body), code.find("\ndef ", body)) if j != -1]
    return code[i:min(ends)]


class ActorConfig:
    """The fields of verl's ActorConfig / PolicyLossConfig the losses read (verl's defaults unless given)."""

    def __init__(self, low: float, high: float, *, clip_ratio_c: float = 3.0, tau_pos: float = 1.0,
                 tau_neg: float = 1.05, **policy_loss: Any) -> None:
        self.clip_ratio, self.clip_ratio_low, self.clip_ratio_high = 0.2, low, high
        self.clip_ratio_c, self.tau_pos, self.tau_neg = clip_ratio_c, tau_pos, tau_neg
        self.global_batch_info: dict = {}
        defaults = dict(clip_cov_ratio=0.0002, clip_cov_lb=1.0, clip_cov_ub=5.0, kl_cov_ratio=0.0002,
                        ppo_kl_coef=0.1, dro_beta=None)
        self.policy_loss = types.SimpleNamespace(**{**defaults, **policy_loss})

    def get(self, key: str, default: Any = None) -> Any:  # verl's BaseConfig is dict-like
        return getattr(self, key, default)


def load_verl_losses(repo: str, names: tuple[str, ...]) -> types.SimpleNamespace:
    """verl's ``compute_policy_loss_<name>`` for each of ``names`` (attributes by name) and ``agg_loss``."""
    tf = verl_source(repo, "verl/utils/torch_functional.py")
    core = verl_source(repo, "verl/trainer/ppo/core_algos.py")
    verl_f = types.SimpleNamespace()
    ns_f: dict = {"torch": torch}
    exec(tf[tf.index("def masked_sum"):tf.index("def masked_var")], ns_f)
    verl_f.masked_sum, verl_f.masked_mean = ns_f["masked_sum"], ns_f["masked_mean"]
    ns: dict = {"torch": torch, "verl_F": verl_f, "Optional": Optional, "Any": Any, "DictConfig": dict,
                "ActorConfig": ActorConfig, "register_policy_loss": lambda name: (lambda fn: fn)}
    ns["AlgoConfig"] = type("AlgoConfig", (), {})
    for start in ("def agg_loss(", *(f'@register_policy_loss("{n}")' for n in names)):
        exec(top_level_block(core, start), ns)
    return types.SimpleNamespace(agg_loss=ns["agg_loss"], **{n: ns[f"compute_policy_loss_{n}"] for n in names})


def random_batch(seed: int, *, weighted: bool, sequence_advantages: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(old log-probs, new log-probs, advantages, mask, weights or None) of 6 rows x 9 tokens, seeded.

    Probabilities around 0.2 that moved a little (what DPPO's thresholds see), every row with a first token,
    advantages per token or, with ``sequence_advantages``, one per row (as GMPO needs)."""
    gen = torch.Generator().manual_seed(seed)
    old = torch.randn(6, 9, generator=gen) * 0.5 - 1.5
    new = old + torch.randn(6, 9, generator=gen) * 0.2
    adv = torch.randn(6, 1, generator=gen).expand(6, 9).clone() if sequence_advantages else \
        torch.randn(6, 9, generator=gen)
    mask = (torch.rand(6, 9, generator=gen) > 0.2).float()
    mask[:, 0] = 1.0
    w = torch.rand(6, 9, generator=gen) * 2 if weighted else None
    return old, new, adv, mask, w


def verl_estimators(repo: str, *names: str) -> dict[str, Any]:
    """verl's advantage estimators ``names`` (AdvantageEstimator members: ``GRPO``, ``GDPO``, ``OPO`` ...) cut out of
    core_algos.py with their imports stubbed; the namespace they ran in (``compute_<name>_outcome_advantage``)."""
    import types
    from collections import defaultdict
    from typing import Optional

    import numpy as np
    import torch

    tf = verl_source(repo, "verl/utils/torch_functional.py")
    core = verl_source(repo, "verl/trainer/ppo/core_algos.py")
    ns_f: dict[str, Any] = {"torch": torch}
    exec(tf[tf.index("def masked_sum"):tf.index("def get_response_mask")], ns_f)
    ns: dict[str, Any] = {"torch": torch, "np": np, "defaultdict": defaultdict, "Optional": Optional,
                          "AlgoConfig": object, "register_adv_est": lambda name: (lambda fn: fn),
                          "AdvantageEstimator": types.SimpleNamespace(**{n: n.lower() for n in names}),
                          "verl_F": types.SimpleNamespace(**ns_f)}
    for name in names:
        exec(top_level_block(core, f"@register_adv_est(AdvantageEstimator.{name})"), ns)
    return ns
