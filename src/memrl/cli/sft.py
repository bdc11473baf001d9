"""``memrl sft`` and ``memrl rft``: supervised fine-tuning on the tokens a model generated.

``sft`` trains on trajectories from anywhere (a JSONL of ``Trajectory.to_dict()`` records, a
training run, an eval folder). ``rft`` is rejection-sampling fine-tuning, the middle stage of
the SFT → RFT → GRPO recipe public τ² results use: keep the episodes of a run's or an eval's
rollouts that reached ``--min-reward`` and train on their generated tokens only, with the loss
masks as sampled (prompts, tool results and user turns are context, never targets).
"""

from __future__ import annotations

import contextlib
import math
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import typer

from memrl import interrupts
from memrl.cli.common import counted
from memrl.cli.errors import user_errors


def _check_vocab(trajs: list[Any], vocab: int, model: str, source: Path) -> None:
    """Every token id below ``vocab``; the first one that is not, named ``file:line:field``.

    The trajectories no longer know their line, so the files are read again, with the bound,
    only when some id is too large (a rare mistake: rollouts sampled with another tokenizer).
    """
    from memrl.data.errors import DataError
    from memrl.eval.records import rollout_paths
    from memrl.io.records import read_trajectories

    top = max((max(c.token_ids) for t in trajs for c in t.conversations if len(c.token_ids)), default=-1)
    if top < vocab:
        return
    hint = f"the rollouts were sampled with another tokenizer than {model}'s (give the model that sampled them: --model)"
    try:
        for file in rollout_paths(source):
            read_trajectories(file, vocab_size=vocab)
    except DataError as err:
        raise DataError(err.file, err.row, err.field, f"{err.message}; {hint}") from None
    raise ValueError(f"{source}: token id {top} is outside the vocabulary of {model} ({vocab} ids); {hint}")


def _check_window(trajs: list[Any], window: int | None, model: str, source: Path) -> None:
    """No conversation longer than the model's context window: positions past it have no embedding to train
    (the forward fails, or on a CPU runs for hours on a quadratic attention that cannot be stopped)."""
    if not window:
        return
    for k, traj in enumerate(trajs, start=1):
        for j, conv in enumerate(traj.conversations):
            if len(conv.token_ids) > window:
                raise ValueError(f"{source}: trajectory {k}, conversations[{j}]: {len(conv.token_ids)} tokens, more "
                                 f"than {model}'s context window of {window}; drop it or train a model with a "
                                 "longer window")


def check_flags(epochs: int, lr: float, batch_rows: int, dtype: str = "float32", weight_decay: float = 0.0,
                lr_schedule: str = "constant") -> None:
    """Refuse a flag no fine-tuning can run with, before anything is read or written."""
    for flag, value, ok, need in (("--epochs", epochs, epochs >= 1, "at least 1"),
                                  ("--lr", lr, math.isfinite(lr) and lr > 0, "a positive finite number"),
                                  ("--batch-rows", batch_rows, batch_rows >= 1, "at least 1")):
        if not ok:
            raise ValueError(f"{flag} {value:g}: must be {need}")
    if dtype not in ("float32", "bfloat16", "float16", "auto"):
        raise ValueError(f"--dtype must be float32, bfloat16, float16 or auto, got {dtype!r}")
    if not weight_decay >= 0:
        raise ValueError(f"--weight-decay must be >= 0, got {weight_decay}")
    if lr_schedule not in ("constant", "linear"):
        raise ValueError(f"--lr-schedule must be constant or linear, got {lr_schedule!r}")


STUCK_GRACE_S = 10.0  # after a signal, how long the current torch call may run before the process ends anyway


@contextlib.contextmanager
def _stops_say_nothing_kept(out: Path, grace_s: float = STUCK_GRACE_S) -> Iterator[None]:
    """Ctrl-C or SIGTERM while fine-tuning: say that nothing was written (the model is exported only at the end)
    and exit 130 / 143, instead of a bare 'interrupted' or a silent death. A step's long torch call delays
    Python's handler until it returns; after ``grace_s`` the process ends without waiting for it."""
    from memrl.signal_watch import exit_unless_answered, watch_stops

    got: list[int] = []

    def on_term(signum: int, frame: Any) -> None:
        got.append(signum)
        raise KeyboardInterrupt

    def said(how: str) -> str:
        return (f"interrupted{how}: fine-tuning stopped before its end, so nothing was written to {out} (a model "
                "is exported only when training completes); re-run the same command to start again")

    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, on_term) if main else None
    handled = threading.Event()
    stuck = said(f" (the step under way did not stop within {grace_s:g} s)")
    try:
        with watch_stops(exit_unless_answered(grace_s, handled, lambda _: stuck)):
            try:
                yield
            except KeyboardInterrupt:
                print(said(""), file=sys.stderr)
                raise typer.Exit(128 + (got[0] if got else signal.SIGINT)) from None
            finally:
                handled.set()
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)


DTYPE_OPT = typer.Option("float32", "--dtype", help="Weights while training: float32 (default; AdamW steps of lr "
                         "1e-5 vanish in bfloat16 weights: 84% of a step's updates were lost on a tiny model), "
                         "bfloat16, float16 or auto (the model's own; bfloat16 on a GPU).")
LR_SCHEDULE_OPT = typer.Option("constant", "--lr-schedule", help="constant (default: runs of a few hundred steps "
                               "on chosen trajectories), or linear: TRL's default, a decay to 0 at the last step.")
WEIGHT_DECAY_OPT = typer.Option(0.0, "--weight-decay", help="AdamW weight decay (TRL's default 0.0), never on biases "
                                "and norm weights.")


def _finetune(trajs: list[Any], model: str, out: Path, force: bool, *, epochs: int, lr: float,
              batch_rows: int, source: Path, dtype: str, weight_decay: float,
              lr_schedule: str = "constant", label: str = "sft") -> tuple[int, float]:
    """Load ``model``, train it on ``trajs`` and export it to ``out``; (optimizer steps, final loss).
    ``label``: the command named in the progress lines (sft, rft)."""
    from memrl.cli.common import quiet_hub_progress
    from memrl.models.resolve import load_model, load_tokenizer
    from memrl.train.policy import export_model
    from memrl.train.sft import sft

    quiet_hub_progress()
    tok = load_tokenizer(model, field="--model")
    policy = load_model(model, dtype, field="--model")
    _check_vocab(trajs, policy.get_input_embeddings().num_embeddings, model, source)
    _check_window(trajs, getattr(policy.config, "max_position_embeddings", None), model, source)
    steps: list[int] = []

    def said(s: int, v: float) -> None:  # every 10 steps and the last, on stderr (stdout is the result)
        interrupts.check()  # a Ctrl-C swallowed while the model loaded stops here
        if s % 10 == 0 or s == steps[0]:
            print(f"{label} step {s}/{steps[0]}: loss {v:.4f}", file=sys.stderr, flush=True)

    with _stops_say_nothing_kept(out):
        losses = sft(policy, trajs, epochs=epochs, lr=lr, weight_decay=weight_decay, decay_biases_and_norms=False,
                     batch_rows=batch_rows, schedule=lr_schedule,
                     pad_id=tok.pad_token_id if tok.pad_token_id is not None else 0,
                     on_start=steps.append, on_step=said)
    export_model(policy, tok, out, force=force)
    return len(losses), losses[-1]


@user_errors
def sft_cmd(
    trajectories: Path = typer.Option(..., "--trajectories", help="JSONL of trajectories (Trajectory.to_dict), "
                                      "a training run or its rollouts/ folder, or an eval folder (memrl eval --out)."),
    model: str = typer.Option(..., "--model", "-m", help="Model to fine-tune (folder, hub id or alias)."),
    out: Path = typer.Option(..., "--out", "-o", help="Where to write the fine-tuned HF model."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it holds an earlier "
                               "export (never a training run or files memrl did not write)."),
    epochs: int = typer.Option(1, "--epochs", help="Passes over the kept conversations."),
    lr: float = typer.Option(1e-5, "--lr", help="AdamW learning rate."),
    batch_rows: int = typer.Option(32, "--batch-rows", help="Conversations per optimizer step."),
    min_reward: Optional[float] = typer.Option(None, "--min-reward", help="Keep only trajectories with reward >= this "
                                               "(rejection-sampling fine-tuning; see also memrl rft)."),
    dtype: str = DTYPE_OPT,
    weight_decay: float = WEIGHT_DECAY_OPT,
    lr_schedule: str = LR_SCHEDULE_OPT,
) -> None:
    """Supervised fine-tuning on trajectories; loss only on model-generated tokens."""
    from memrl.eval.records import read_rollouts
    from memrl.train.outdir import check_target

    check_flags(epochs, lr, batch_rows, dtype, weight_decay, lr_schedule)
    if min_reward is not None and math.isnan(min_reward):
        raise ValueError("--min-reward nan: give a number (no reward is >= nan, so nothing would be kept)")
    check_target(out, force, _local_inputs(trajectories, model))  # before training, not after
    trajs = read_rollouts(trajectories)
    _say_run_sample(trajectories)
    if min_reward is not None:
        trajs = [t for t in trajs if t.reward >= min_reward]
    if not trajs:
        raise ValueError(f"{trajectories}: no trajectories left to train on")
    steps, loss = _finetune(trajs, model, out, force, epochs=epochs, lr=lr, batch_rows=batch_rows,
                            source=trajectories, dtype=dtype, weight_decay=weight_decay,
                            lr_schedule=lr_schedule)
    typer.echo(f"{counted(len(trajs), 'trajectory', 'trajectories')}, {counted(steps, 'step')}, final loss "
               f"{loss:.4f}; model in {out}")


def run_sample_note(source: Path) -> str | None:
    """What a training run's rollouts are a sample of, or None for an eval folder or a file (which hold every
    episode): a run keeps ``trainer.rollouts_per_step`` episodes (best, worst, random) of the ``algorithm.n x
    trainer.prompts_per_step`` each recorded step sampled, so fine-tuning on them is not on all it generated."""
    import yaml

    config = source / "config.yaml"
    if not source.is_dir() or not config.is_file() or (source / "eval_config.yaml").is_file():
        return None
    try:
        saved = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
        trainer, algorithm = saved.get("trainer") or {}, saved.get("algorithm") or {}
        kept, every = int(trainer["rollouts_per_step"]), int(trainer.get("rollouts_every", 1))
        sampled = int(trainer["prompts_per_step"]) * int(algorithm["n"])
    except (yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError):
        return None
    if kept >= sampled and every <= 1:
        return None
    steps = "each step" if every <= 1 else f"each step it recorded (one in {every})"
    return (f"note: {source} is a training run: it kept {kept} of the {sampled} episodes of {steps} "
            "(best, worst and random: trainer.rollouts_per_step, trainer.rollouts_every); memrl eval --out DIR "
            "keeps every episode it samples")


def _say_run_sample(source: Path) -> None:
    """:func:`run_sample_note` on standard error (stdout is the command's result), when there is one."""
    note = run_sample_note(source)
    if note:
        typer.echo(note, err=True)


def _local_inputs(data: Path, model: str | None) -> list[Path]:
    """What the command reads from disk, which ``--out --force`` must never replace: the data, and the model
    when it is a local folder."""
    return [data] + ([Path(model)] if model and Path(model).exists() else [])


def recorded_model(folder: Path) -> str | None:
    """The model that sampled a run's or an eval's rollouts, from its saved settings."""
    import yaml

    for name in ("config.yaml", "eval_config.yaml"):
        path = folder / name
        if path.is_file():
            spec = ((yaml.safe_load(path.read_text()) or {}).get("model") or {}).get("path")
            if spec:
                return str(spec)
    return None


@user_errors
def rft_cmd(
    rollouts: Path = typer.Argument(..., help="A training run, an eval folder (memrl eval --out), a rollouts/ "
                                    "folder or one rollouts .jsonl file."),
    min_reward: float = typer.Option(1.0, "--min-reward", help="Keep episodes with reward >= this (1.0: τ² "
                                     "success)."),
    out: Path = typer.Option(..., "--out", "-o", help="Where to write the fine-tuned HF model."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model to fine-tune (default: the model "
                                        "recorded in the folder's config.yaml / eval_config.yaml)."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it holds an earlier "
                               "export (never a training run or files memrl did not write)."),
    epochs: int = typer.Option(1, "--epochs", help="Passes over the kept conversations."),
    lr: float = typer.Option(1e-5, "--lr", help="AdamW learning rate."),
    batch_rows: int = typer.Option(32, "--batch-rows", help="Conversations per optimizer step."),
    dtype: str = DTYPE_OPT,
    weight_decay: float = WEIGHT_DECAY_OPT,
    lr_schedule: str = LR_SCHEDULE_OPT,
) -> None:
    """Rejection-sampling fine-tuning: SFT on the generated tokens of the episodes that reached --min-reward."""
    from memrl.eval.records import read_rollouts, rollout_paths
    from memrl.train.outdir import check_target

    check_flags(epochs, lr, batch_rows, dtype, weight_decay, lr_schedule)
    if math.isnan(min_reward):
        raise ValueError("--min-reward nan: give a number (no reward is >= nan, so nothing would be kept)")
    check_target(out, force, _local_inputs(rollouts, model))
    rollout_paths(rollouts)  # a folder with no rollouts is the mistake to name, not a missing --model
    base = model or (recorded_model(rollouts) if rollouts.is_dir() else None)
    if base is None:
        raise ValueError(f"--model: {rollouts} records no model (no config.yaml or eval_config.yaml); name one")
    check_target(out, force, _local_inputs(rollouts, base))  # the recorded model may be a local folder
    every = read_rollouts(rollouts)
    _say_run_sample(rollouts)
    kept = [t for t in every if t.reward >= min_reward]
    tokens = sum(c.num_generated for t in kept for c in t.conversations)
    typer.echo(f"rft: kept {len(kept)} of {counted(len(every), 'episode')} with reward >= {min_reward:g} "
               f"({tokens} generated tokens to train on); model {base}")
    if not kept or tokens == 0:
        best = max((t.reward for t in every), default=None)
        raise ValueError(f"--min-reward {min_reward:g}: no episode of {rollouts} qualifies with generated tokens "
                         f"(best reward {best if best is None else f'{best:g}'}); lower it or sample more")
    steps, loss = _finetune(kept, base, out, force, epochs=epochs, lr=lr, batch_rows=batch_rows,
                            source=rollouts, dtype=dtype, weight_decay=weight_decay, lr_schedule=lr_schedule,
                            label="rft")
    typer.echo(f"rft: {counted(len(kept), 'episode')}, {counted(steps, 'step')}, final loss {loss:.4f}; model in {out}")
