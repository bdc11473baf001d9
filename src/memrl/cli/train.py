"""``memrl train``, ``memrl sft``, ``memrl export``, ``memrl plot``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from memrl.cli.common import resolve_config
from memrl.cli.errors import user_errors


@user_errors
def train_cmd(
    config: Optional[Path] = typer.Argument(None, help="YAML config."),
    overrides: Optional[list[str]] = typer.Argument(None, help="Dotted overrides, e.g. trainer.lr=1e-6 algorithm.n=16."),
) -> None:
    """RL-train an agent (GRPO/DAPO/RLOO/REINFORCE++) with the configured workflow.

    Re-running the same command resumes from the latest checkpoint in trainer.output_dir.
    Scale out with cluster.rollout_replicas=R (Ray engine actors; cluster.address=auto joins a running
    Ray cluster) and cluster.trainers=W (data-parallel ranks; or launch under torchrun).
    """
    from memrl.dist.launch import train

    cfg = resolve_config(config, overrides, {})
    step, last = train(cfg)
    typer.echo(f"done: step {step}, reward {last.get('reward', float('nan')):.3f}; "
               f"checkpoints in {cfg.trainer.output_dir}/checkpoints")


@user_errors
def sft_cmd(
    trajectories: Path = typer.Option(..., "--trajectories", help="JSONL of trajectories (Trajectory.to_dict)."),
    model: str = typer.Option(..., "--model", "-m", help="Model to fine-tune (folder, hub id or alias)."),
    out: Path = typer.Option(..., "--out", "-o", help="Where to write the fine-tuned HF model."),
    epochs: int = typer.Option(1, "--epochs"),
    lr: float = typer.Option(1e-5, "--lr"),
    batch_rows: int = typer.Option(32, "--batch-rows", help="Conversations per optimizer step."),
    min_reward: Optional[float] = typer.Option(None, "--min-reward", help="Keep only trajectories with reward >= this "
                                               "(rejection-sampling fine-tuning)."),
) -> None:
    """Supervised fine-tuning on trajectories; loss only on model-generated tokens."""
    from memrl.models.resolve import load_model, load_tokenizer
    from memrl.train.policy import export_model
    from memrl.train.sft import read_trajectories, sft

    trajs = read_trajectories(trajectories)
    if min_reward is not None:
        trajs = [t for t in trajs if t.reward >= min_reward]
    if not trajs:
        raise ValueError(f"{trajectories}: no trajectories left to train on")
    tok = load_tokenizer(model)
    policy = load_model(model)
    losses = sft(policy, trajs, epochs=epochs, lr=lr, batch_rows=batch_rows,
                 pad_id=tok.pad_token_id if tok.pad_token_id is not None else 0,
                 on_step=lambda s, v: typer.echo(f"sft step {s}: loss {v:.4f}") if s % 10 == 0 else None)
    export_model(policy, tok, out)
    typer.echo(f"{len(trajs)} trajectories, {len(losses)} steps, final loss {losses[-1]:.4f}; model in {out}")


@user_errors
def export_cmd(
    run_dir: Path = typer.Argument(..., help="A training run folder (trainer.output_dir)."),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder for the plain Hugging Face model."),
    step: Optional[int] = typer.Option(None, "--step", help="Checkpoint step (default: latest)."),
) -> None:
    """Write a plain HF model (LoRA merged, safetensors) that transformers and vLLM load as-is."""
    from memrl.train.export import export_run

    path = export_run(run_dir, out, step)
    typer.echo(f"exported {path}")


@user_errors
def plot_cmd(
    run_dir: Path = typer.Argument(..., help="A training run folder."),
    out: Optional[Path] = typer.Option(None, "--out", help="PNG path (default RUN_DIR/curves.png)."),
) -> None:
    """Plot training curves (reward, eval accuracy, lengths, KL, entropy, grad norm) to PNG."""
    from memrl.train.tracking import plot_run

    typer.echo(f"wrote {plot_run(run_dir, out)}")
