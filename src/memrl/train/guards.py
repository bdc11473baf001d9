"""Steps that train nothing: say why, and stop a run that keeps doing it.

A step can end with no rows to train on because every episode raised, every
prompt was longer than the context budget, or dynamic sampling dropped every
group. One such step is noise; ``trainer.max_failed_steps`` of them in a row
mean the run is burning compute on nothing, and it stops naming the cause and
the setting to change.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memrl.config import MemRLConfig


class NothingTrainableError(RuntimeError):
    """Too many steps in a row had nothing to train on."""


class RunFinished(Exception):
    """The run's newest checkpoint is already at ``trainer.total_steps``."""

    def __init__(self, step: int, total_steps: int) -> None:
        super().__init__(f"run already finished at step {step} (trainer.total_steps={total_steps}); raise "
                         "trainer.total_steps to continue or use another trainer.output_dir")
        self.step = step


@dataclass
class RolloutTally:
    """What happened to one step's episodes (rank 0 fills it, every rank reads it)."""

    attempted: int = 0
    failed: int = 0
    prompt_too_long: int = 0
    dropped_groups: int = 0
    last_error: str = ""
    said: set[str] = field(default_factory=set)  # failure messages printed this step
    repeated: int = 0  # failures not printed: the same message as one printed this step
    stopped: int = 0  # episodes a stop cut short (trainer.stop_grace_s)
    baseline_failed: int = 0  # groups left out because their greedy baseline episode failed (adv_estimator=remax)

    def first_time(self, message: str) -> bool:
        """Whether ``message`` is new this step (print it); a repeat is only counted."""
        if message in self.said:
            self.repeated += 1
            return False
        self.said.add(message)
        return True

    def cause(self, cfg: MemRLConfig) -> str:
        """Why this step had nothing to train on, and what to change."""
        if self.attempted and self.failed >= self.attempted:
            return (f"every episode failed (last error: {self.last_error}); fix that, or raise "
                    "trainer.max_failed_steps to tolerate more such steps")
        if self.prompt_too_long:
            return (f"{self.prompt_too_long} of {self.attempted} episodes ended before generating a token: the prompt "
                    f"is longer than workflow.options.max_total_tokens={cfg.workflow.max_total_tokens}; raise "
                    "workflow.options.max_total_tokens")
        if cfg.algorithm.dynamic_sampling and self.dropped_groups:
            why = "equal rewards in each" if cfg.algorithm.dynamic_sampling_max_mean is None else \
                f"mean reward above algorithm.dynamic_sampling_max_mean={cfg.algorithm.dynamic_sampling_max_mean}"
            return (f"dynamic sampling dropped every group ({why}) in "
                    f"{cfg.algorithm.max_gen_batches} rollout round(s); raise algorithm.max_gen_batches (0: no "
                    "limit) or set algorithm.dynamic_sampling=false")
        if self.baseline_failed:
            return (f"the greedy baseline episode failed in {self.baseline_failed} group(s) (last error: "
                    f"{self.last_error}), and adv_estimator={cfg.algorithm.adv_estimator!r} trains a group only "
                    "against its baseline; fix that failure, or choose another algorithm.adv_estimator")
        return ("no episode generated a token to train on; check the workflow's token limits "
                "(workflow.* settings)")


class IdleStreak:
    """Counts steps in a row with nothing to train on; ``check`` raises once that reaches ``trainer.max_failed_steps``."""

    def __init__(self, cfg: MemRLConfig, streak: int = 0) -> None:
        self.cfg = cfg
        self.streak = streak
        self.cause = ""

    def record(self, trainable: bool, tally: RolloutTally) -> str | None:
        """Update the streak; returns the warning to print for an idle step (None for a trainable one)."""
        if trainable:
            self.streak, self.cause = 0, ""
            return None
        self.streak += 1
        self.cause = tally.cause(self.cfg)
        return (f"nothing to train on this step ({self.streak} in a row, stopping at "
                f"{self.cfg.trainer.max_failed_steps}): {self.cause}")

    def check(self) -> None:
        """Raise once the streak reaches the limit (called after the step's metrics are on disk)."""
        limit = self.cfg.trainer.max_failed_steps
        if self.streak >= limit:
            raise NothingTrainableError(f"{self.streak} step(s) in a row had nothing to train on "
                                        f"(trainer.max_failed_steps={limit}): {self.cause}")
