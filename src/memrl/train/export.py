"""Export a run's checkpoint as a plain Hugging Face model."""

from __future__ import annotations

from pathlib import Path

import yaml

from memrl.config import MemRLConfig
from memrl.train import checkpoint
from memrl.train.outdir import check_target
from memrl.train.policy import build_policy, export_model


def export_run(run_dir: Path, out: Path, step: int | None = None, *, force: bool = False) -> Path:
    """Export checkpoint ``step`` (default: the newest) of ``run_dir`` to ``out``; refuses a damaged checkpoint.

    ``out`` must be new or an empty folder; ``force`` replaces a non-empty one (never a file).
    """
    check_target(out, force, [run_dir])  # before loading a model: a wrong --out costs nothing
    cfg_path = run_dir / "config.yaml"
    if not cfg_path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a training run (no config.yaml)")
    cfg = _weights_config(yaml.safe_load(cfg_path.read_text()))
    found = dict(checkpoint.checkpoints(run_dir))
    if not found:
        raise FileNotFoundError(f"{run_dir} has no checkpoints yet")
    chosen = max(found) if step is None else step
    if chosen not in found:
        raise ValueError(f"--step {step}: available checkpoints are {sorted(found)}")
    why = checkpoint.verify(found[chosen])
    if why is not None:
        raise checkpoint.CheckpointError(f"checkpoint {found[chosen]} is damaged ({why}); export another --step")
    from memrl.models.resolve import config_tokenizer

    policy = build_policy(cfg, device="cpu")
    checkpoint.load_weights(policy, found[chosen])
    return export_model(policy, config_tokenizer(cfg.model), out, force=force)


# what building the policy reads: the model, its adapter, and whether it was checkpointed
WEIGHT_SECTIONS = ("model", "lora", "trainer")


def _weights_config(raw: object) -> MemRLConfig:
    """The run's config, as far as its weights go. A run trained with the user's own workflow (or reward, or
    teacher builder) names an import path that need not import where the export runs: those sections are not
    needed to rebuild the weights, so only the model, LoRA and trainer sections are validated then."""
    from pydantic import ValidationError

    try:
        return MemRLConfig.model_validate(raw)
    except ValidationError:
        if not isinstance(raw, dict):
            raise
        return MemRLConfig.model_validate({k: v for k, v in raw.items() if k in WEIGHT_SECTIONS})
