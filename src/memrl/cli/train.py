"""``memrl train``, ``memrl sft``, ``memrl export``, ``memrl plot``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn, Optional

import typer

from memrl.cli.common import quiet_hub_progress, resolve_config
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
    from memrl.engines.base import EngineDeadError
    from memrl.train.guards import NothingTrainableError, RunFinished
    from memrl.train.signals import TrainingInterrupted
    from memrl.train.trainer import NonFiniteLossError

    cfg = resolve_config(config, overrides, {})
    quiet_hub_progress()
    where = f"{cfg.trainer.output_dir}/checkpoints"
    try:
        step, last = train(cfg)
    except RunFinished as done:
        typer.echo(str(done))
        return
    except TrainingInterrupted as stop:
        _fail(str(stop), stop.exit_code)
    except EngineDeadError as err:
        _fail(f"error: the engine died, stopping the run: {err} (metrics and checkpoints so far are in "
              f"{cfg.trainer.output_dir})", 1)
    except (NothingTrainableError, NonFiniteLossError) as err:
        _fail(f"error: {err}", 1)
    if "reward" not in last:  # every episode of the last step failed: not a run to call done
        _fail(f"error: step {step} finished but none of its episodes completed "
              f"({last.get('failed_episodes', 0):.0f} failed episodes so far, see the warnings above); "
              f"checkpoints in {where}", 1)
    rollouts = Path(cfg.trainer.output_dir) / "rollouts"
    typer.echo(f"done: step {step}, reward {last['reward']:.3f}; checkpoints in {where}, metrics in "
               f"{cfg.trainer.output_dir}/metrics.jsonl" + (f", rollouts in {rollouts}" if rollouts.is_dir() else ""))


def _fail(message: str, code: int) -> NoReturn:
    """One line on stderr and a non-zero exit: the run ended for a reason that is not a bad setting."""
    print(message, file=sys.stderr)
    raise typer.Exit(code)


@user_errors
def sft_cmd(
    trajectories: Path = typer.Option(..., "--trajectories", help="JSONL of trajectories (Trajectory.to_dict), "
                                      "or a training run / its rollouts/ folder."),
    model: str = typer.Option(..., "--model", "-m", help="Model to fine-tune (folder, hub id or alias)."),
    out: Path = typer.Option(..., "--out", "-o", help="Where to write the fine-tuned HF model."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it is a non-empty folder."),
    epochs: int = typer.Option(1, "--epochs"),
    lr: float = typer.Option(1e-5, "--lr"),
    batch_rows: int = typer.Option(32, "--batch-rows", help="Conversations per optimizer step."),
    min_reward: Optional[float] = typer.Option(None, "--min-reward", help="Keep only trajectories with reward >= this "
                                               "(rejection-sampling fine-tuning)."),
) -> None:
    """Supervised fine-tuning on trajectories; loss only on model-generated tokens."""
    from memrl.models.resolve import load_model, load_tokenizer
    from memrl.train.policy import export_model
    from memrl.train.outdir import check_target
    from memrl.train.sft import read_trajectories, sft

    check_target(out, force)  # before training, not after
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
    export_model(policy, tok, out, force=force)
    typer.echo(f"{len(trajs)} trajectories, {len(losses)} steps, final loss {losses[-1]:.4f}; model in {out}")


@user_errors
def export_cmd(
    run_dir: Path = typer.Argument(..., help="A training run folder (trainer.output_dir)."),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder for the plain Hugging Face model."),
    step: Optional[int] = typer.Option(None, "--step", help="Checkpoint step (default: latest)."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it is a non-empty folder."),
) -> None:
    """Write a plain HF model (LoRA merged, safetensors) that transformers and vLLM load as-is."""
    from memrl.train.export import export_run

    path = export_run(run_dir, out, step, force=force)
    typer.echo(f"exported {path}")


@user_errors
def plot_cmd(
    run_dir: Path = typer.Argument(..., help="A training run folder."),
    out: Optional[Path] = typer.Option(None, "--out", help="PNG path (default RUN_DIR/curves.png)."),
) -> None:
    """Plot training curves (reward, eval accuracy, lengths, KL, entropy, grad norm) to PNG."""
    from memrl.train.tracking import plot_run

    typer.echo(f"wrote {plot_run(run_dir, out)}")
