"""Adaptive entropy control (Skywork-OR1, arXiv 2505.22312), as TRL's GRPOTrainer runs it (``use_adaptive_entropy``).

Why: a fixed entropy bonus either does nothing or, once set large enough to matter, keeps pushing entropy up long
after exploration has recovered. Adaptive control turns the bonus on only while the policy's entropy is at or
below a target, and moves its coefficient by a fixed step after every optimizer step: up while the entropy stays
at or below the target, down (not below a floor) once it is above.

The steps follow ``trl/trainer/grpo_trainer.py`` at f2cd577: the coefficient applied during an optimizer step is
the one set at the end of the previous step, and 0 unless that step's entropy was at or below the target (the
first step: none measured, 0); the entropy measured is the step's mean per-token entropy over every rank, on the
tokens the bonus acts on (the kept ones under ``top_entropy_quantile``). The state is saved with a checkpoint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass
class AdaptiveEntropy:
    """The controller of one run: ``coef`` (starts at ``algorithm.entropy_coef``), the last step's entropy, and
    the current optimizer step's running sums."""

    coef: float
    target: float
    delta: float
    low: float
    high: float
    last_entropy: float = math.inf
    _sum: float = 0.0
    _count: float = 0.0

    @classmethod
    def from_config(cls, algorithm: Any) -> AdaptiveEntropy | None:
        """The controller ``algorithm`` asks for (None: a fixed ``entropy_coef``)."""
        if not algorithm.adaptive_entropy:
            return None
        return cls(algorithm.entropy_coef, algorithm.entropy_target, algorithm.entropy_coef_delta,
                   algorithm.entropy_coef_min, algorithm.entropy_coef_max)

    def applied(self) -> float:
        """The coefficient of the entropy bonus in this optimizer step."""
        return self.coef if self.last_entropy <= self.target else 0.0

    def observe(self, entropy_sum: float, tokens: float) -> None:
        """Add one micro-batch's summed entropy over the bonus's tokens, and how many tokens."""
        self._sum += entropy_sum
        self._count += tokens

    def window(self) -> list[float]:
        """This rank's sums of the step, for the sum over ranks."""
        return [self._sum, self._count]

    def end_step(self, totals: list[float]) -> None:
        """After an optimizer step, given the sums over every rank: move the coefficient, start a new window."""
        entropy = totals[0] / max(totals[1], 1.0)
        if entropy <= self.target:
            self.coef = min(self.coef + self.delta, self.high)
        else:
            self.coef = max(self.coef - self.delta, self.low)
        self.last_entropy = entropy
        self._sum = self._count = 0.0

    def state(self) -> dict[str, float | None]:
        """What a checkpoint keeps (TRL's entropy_coef and last_world_entropy; JSON has no infinity)."""
        last = None if not math.isfinite(self.last_entropy) else self.last_entropy  # inf, or NaN: none measured
        return {"coef": self.coef, "last_entropy": last}

    def restore(self, saved: dict[str, Any] | None) -> None:
        """Continue from a checkpoint's :meth:`state` (None: a checkpoint without one, the start)."""
        if saved:
            self.coef = float(saved["coef"])
            last = saved.get("last_entropy")
            self.last_entropy = math.inf if last is None else float(last)
