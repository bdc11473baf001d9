"""On-policy distillation in the trainer: a teacher scores every row's tokens, and rows get its advantage.

Each row is one conversation, so each conversation is scored in its own context: the teacher reads
exactly the token ids the student saw and sampled (its prompt, memory and chunk for MemAgent), and
its log-probs of the sampled tokens are temperature-scaled like the trainer's (``sampling.temperature``),
so both sides of ``log pi_student - log pi_teacher`` describe the distribution the engine sampled from.

The signal (:func:`memrl.rl.distill_advantages`) is written into ``row.advantages`` after the
old log-probs exist and before the PPO epochs, so every policy loss, aggregation and correction
applies to it unchanged.

Teacher engines are registered by name (``teacher.engine``): ``hf`` loads the teacher in-process
beside the policy; ``openai`` asks a vLLM server for prompt log-probs (:mod:`memrl.train.teacher_http`). Yours: ``@register_teacher("name")`` on a builder ``(cfg, tokenizer, device) ->
scorer`` whose ``logprobs(rows, temperature)`` returns each row's log-probs over its target positions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from memrl.config import ConfigError, MemRLConfig
from memrl.config.registry import TEACHERS
from memrl.rl.distill import distill_advantages, reverse_kl
from memrl.train.batch import Row, collate, micro_batches, token_logprobs


class TeacherScorer(Protocol):
    """What a teacher engine does: log-probs of each row's tokens ``[len(row) - 1]`` (target positions)."""

    def logprobs(self, rows: Sequence[Row], temperature: float) -> list[torch.Tensor]: ...


def register_teacher(name: str) -> Callable[[Any], Any]:
    """Register a teacher builder ``(cfg, tokenizer, device) -> TeacherScorer`` as ``teacher.engine=name``."""
    return lambda builder: TEACHERS.register(name, builder)


class HFTeacher:
    """The teacher as an in-process transformers model, frozen, scored in micro-batches like the policy."""

    def __init__(self, model: Any, pad_id: int, micro_batch_tokens: int) -> None:
        self.model = model
        self.pad_id = pad_id
        self.micro_batch_tokens = micro_batch_tokens

    @torch.no_grad()
    def logprobs(self, rows: Sequence[Row], temperature: float) -> list[torch.Tensor]:
        device = next(self.model.parameters()).device
        out: list[torch.Tensor] = [torch.empty(0)] * len(rows)
        for mb in micro_batches(rows, self.micro_batch_tokens):
            group = [rows[i] for i in mb]
            lp, _ = token_logprobs(self.model, collate(group, self.pad_id, device), temperature, response_only=True)
            for i, v in zip(mb, lp):
                out[i] = v[: len(rows[i]) - 1].float().cpu()
        return out


@register_teacher("hf")
def hf_teacher(cfg: MemRLConfig, tokenizer: Any, device: torch.device) -> HFTeacher:
    """``teacher.model`` loaded with transformers on ``teacher.device`` (default: the trainer's device)."""
    from memrl.models.resolve import load_model, load_tokenizer

    t = cfg.teacher
    check_same_vocabulary(tokenizer, load_tokenizer(t.model, field="teacher.model"), t.model)
    model = load_model(t.model, dtype=t.dtype, device=t.device or str(device))
    for p in model.parameters():
        p.requires_grad_(False)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return HFTeacher(model.eval(), pad_id, cfg.trainer.micro_batch_tokens)


@register_teacher("openai")
def openai_teacher(cfg: MemRLConfig, tokenizer: Any, device: torch.device) -> Any:
    """An OpenAI-compatible server returning prompt log-probs (vLLM) at ``teacher.base_url``."""
    from memrl.models.resolve import load_tokenizer
    from memrl.train.teacher_http import OpenAITeacher

    t = cfg.teacher
    scored_at = t.temperature if t.temperature is not None else (cfg.sampling.temperature or 1.0)
    if scored_at != 1.0:
        raise ConfigError(f"teacher.engine=openai: the server's prompt log-probs are of the unscaled distribution, "
                          f"so the teacher must score at temperature 1 (it would at {scored_at:g}): set "
                          "teacher.temperature=1 or sampling.temperature=1, or use teacher.engine=hf")
    check_same_vocabulary(tokenizer, load_tokenizer(t.model, field="teacher.model"), t.model)
    return OpenAITeacher.from_env(t.base_url, t.served_model or t.model, t.api_key_env)


def check_same_vocabulary(student: Any, teacher: Any, name: str) -> None:
    """The teacher scores the student's token ids: one id must mean one string to both."""
    if student.get_vocab() != teacher.get_vocab():
        raise ConfigError(f"teacher.model={name!r}: its tokenizer's vocabulary differs from model.path's "
                          f"({len(teacher)} vs {len(student)} tokens); the teacher must read the student's token "
                          "ids, so pick a teacher of the same family")


class Teacher:
    """``teacher.*`` in the update: scores rows and turns the reverse KL into their advantages."""

    def __init__(self, cfg: MemRLConfig, scorer: TeacherScorer) -> None:
        self.options = cfg.teacher
        self.scorer = scorer

    @property
    def reads_trainer_logprobs(self) -> bool:
        """Whether the signal needs the trainer's old log-probs before the update (``teacher.student``)."""
        return self.options.student == "trainer"

    def apply(self, rows: Sequence[Row], temperature: float) -> dict[str, float]:
        """Score ``rows``, set their advantages (``teacher.mode``); the step's ``distill/*`` metrics."""
        t0 = time.perf_counter()
        own = self.options.temperature
        teacher = self.scorer.logprobs(rows, own if own is not None else temperature)
        width = max(len(r) - 1 for r in rows)
        student, teach, mask = (torch.zeros((len(rows), width)) for _ in range(3))
        for i, r in enumerate(rows):
            n = len(r) - 1
            student[i, :n] = self._student(r)[:n]
            teach[i, :n] = teacher[i][:n]
            mask[i, :n] = torch.as_tensor(r.loss_mask[1:], dtype=torch.float32)
        o = self.options
        adv = distill_advantages(student, teach, mask, coef=o.weight, discount=o.discount)
        for i, r in enumerate(rows):
            own = adv[i, : len(r) - 1].clone()
            r.advantages = own if o.mode == "replace" or r.advantages is None else r.advantages + own
        return {"distill/reverse_kl": reverse_kl(student, teach, mask),
                "distill/teacher_logprob": float((teach * mask).sum() / mask.sum().clamp(min=1)),
                "time/teacher": time.perf_counter() - t0}

    def _student(self, row: Row) -> torch.Tensor:
        if self.options.student == "engine":
            return torch.as_tensor(list(row.engine_logprobs[1:]), dtype=torch.float32)
        if row.old_logprobs is None:
            raise RuntimeError("teacher.student=trainer: the rows have no old log-probs (computed before the update)")
        return row.old_logprobs.float()


def build_teacher(cfg: MemRLConfig, tokenizer: Any, device: torch.device) -> Teacher | None:
    """The run's teacher (``teacher.model``), or None when distillation is off."""
    if not cfg.teacher.enabled:
        return None
    return Teacher(cfg, TEACHERS.get(cfg.teacher.engine)(cfg, tokenizer, device))
