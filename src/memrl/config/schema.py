"""The configuration schema: one pydantic model per section.

Every section forbids unknown keys so that a typo (``trainer.lrr``) fails loudly
instead of silently training with a default. Sections grow as features land;
a field appears here only when code reads it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Section(BaseModel):
    """Base for config sections: strict about keys, lenient about scalar spelling."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, coerce_numbers_to_str=True)


class ModelConfig(Section):
    """Which model to load (a local Hugging Face folder, a hub id, or a memrl alias)."""

    path: str = Field("tiny", description="HF model folder/id or alias such as 'tiny'.")
    tokenizer: str | None = Field(None, description="Tokenizer path; defaults to the model's.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"


class DataConfig(Section):
    """Long-context data synthesis (``memrl data synth``) and dataset locations."""

    input: str | None = Field(None, description="Source QA file (HotpotQA JSON, JSONL or parquet).")
    pool: list[str] = Field(default_factory=list, description="Extra distractor paragraph files.")
    out: str = Field("data/synth", description="Output folder for synthesized files.")
    docs: list[int] = Field(
        default_factory=lambda: [50, 100, 200, 400, 800, 1600, 3200, 6400],
        description="Number of documents per eval file (RULER-HQA sizes).",
    )
    train_tokens: int | None = Field(None, description="Token budget of the training file.")
    seed: int = 42
    allow_repeats: bool = False
    include_question_distractors: bool = True
    format: Literal["json", "jsonl", "parquet"] = "json"
    max_samples: int | None = None

    @field_validator("docs")
    @classmethod
    def _positive_docs(cls, v: list[int]) -> list[int]:
        bad = [n for n in v if n <= 0]
        if bad:
            raise ValueError(f"document counts must be positive, got {bad}")
        return v


class TrainerConfig(Section):
    """Optimisation and run bookkeeping."""

    lr: float = Field(1e-6, gt=0)
    seed: int = 42
    output_dir: str = "runs/default"
    total_steps: int = Field(100, ge=0)
    save_every: int = Field(10, ge=1)


class MemRLConfig(Section):
    """The whole configuration, as printed by ``memrl config show``."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
