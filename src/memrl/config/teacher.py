"""``teacher.*``: on-policy distillation, a teacher model scoring the tokens the student sampled.

Off unless ``teacher.model`` names a model. The teacher reads the student's token ids as they are, so
it must share the student's tokenizer (checked when the run starts). See ``memrl.rl.distill`` for the
signal and docs/reference/algorithms.md for the recipe it follows.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from memrl.config.registry import TEACHERS, registered
from memrl.config.section import Finite, Section, ServerURL


class TeacherConfig(Section):
    """On-policy distillation: per-token advantage -(log pi_student - log pi_teacher) on the student's samples."""

    model: str | None = Field(None, description="Teacher model (HF folder/id or alias, same tokenizer as "
                              "model.path); null: no distillation.")
    engine: registered(TEACHERS) = Field("hf", description="How the teacher scores tokens: hf (an in-process "
                                         "transformers model beside the policy), openai (a vLLM server's prompt "
                                         "log-probs at teacher.base_url) or an import path to a builder "
                                         "(cfg, tokenizer, device) -> scorer (memrl.train.teacher).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field("auto", description="hf: the teacher's "
                                                                     "weights dtype.")
    device: str | None = Field(None, description="hf: the teacher's device (default: the trainer's).")

    @field_validator("device")
    @classmethod
    def _device(cls, v: str | None) -> str | None:
        from memrl.config.engine import check_device_name

        return check_device_name(v, "teacher.device")
    base_url: ServerURL | None = Field(None, description="openai: server root, e.g. http://127.0.0.1:8001/v1.")
    served_model: str | None = Field(None, description="openai: model name sent in requests (default: "
                                     "teacher.model).")
    api_key_env: str = Field("OPENAI_API_KEY", description="openai: environment variable holding the key.")
    mode: Literal["replace", "add"] = Field("replace", description="replace: the distillation advantage alone "
                                            "(rewards are still computed and logged); add: added to the RL "
                                            "advantage of algorithm.adv_estimator.")
    weight: Finite = Field(1.0, gt=0, description="Coefficient of the distillation advantage (tinker's "
                          "kl_penalty_coef).")
    discount: float = Field(0.0, ge=0, le=1, description="0: each token's own reverse KL; >0: the discounted "
                            "sum of its own and later tokens' (tinker's kl_discount_factor).")
    temperature: Finite | None = Field(None, gt=0, description="Temperature the teacher scores at: null = "
                                       "sampling.temperature (both sides of the reverse KL temperature-scaled, as "
                                       "the trainer's log-probs); 1.0 = the teacher's own distribution (the student "
                                       "side stays at sampling.temperature; tinker-cookbook and TRL's GKD loss "
                                       "score both sides at 1, equal to memrl at sampling.temperature=1).")
    student: Literal["trainer", "engine"] = Field("trainer", description="Student log-probs of the signal: "
                                                  "trainer (recomputed before the update; one more forward "
                                                  "pass) or engine (the sampling log-probs, as tinker does).")

    @property
    def enabled(self) -> bool:
        return self.model is not None

    @model_validator(mode="after")
    def _needs_model(self) -> "TeacherConfig":
        """A teacher option changed without a teacher would silently train without one."""
        if self.model is None:
            fields = type(self).model_fields  # a dumped config repeats the defaults: only other values count
            changed = sorted(k for k, f in fields.items() if k != "model" and getattr(self, k) != f.default)
            if changed:
                raise ValueError(f"teacher.{changed[0]} is set but teacher.model is not: name the teacher model")
        if self.engine == "openai" and not self.base_url:
            raise ValueError("teacher.base_url is required with teacher.engine=openai (the server's /v1 root)")
        return self
