"""``memrl train``, ``memrl export``, ``memrl plot`` (``memrl sft`` / ``rft``: :mod:`memrl.cli.sft`)."""

from __future__ import annotations

import contextlib
import difflib
import os
import sys
from pathlib import Path
from collections.abc import Iterator
from typing import Any, NoReturn, Optional

import typer

from memrl.cli.common import quiet_hub_progress, resolve_config
from memrl.cli.errors import user_errors


@user_errors
def train_cmd(
    config: Optional[Path] = typer.Argument(None, help="YAML config."),
    overrides: Optional[list[str]] = typer.Argument(None, help="Dotted overrides, e.g. trainer.lr=1e-6 algorithm.n=16."),
    allow_changes: Optional[str] = typer.Option(None, "--allow-changes", help="Comma-separated settings a resumed "
                                                "run may change from its saved config, e.g. trainer.lr "
                                                "(trainer.allow_changes)."),
) -> None:
    """RL-train an agent (GRPO/DAPO/RLOO/REINFORCE++) with the configured workflow.

    Re-running the same command resumes from the latest checkpoint in trainer.output_dir.
    Scale out with cluster.rollout_replicas=R (Ray engine actors; cluster.address=auto joins a running
    Ray cluster) and cluster.trainers=W (data-parallel ranks; or launch under torchrun).

    Examples:

      memrl train configs/tool_agent_demo.yaml        # CPU, tiny model
      memrl train configs/memagent_grpo.yaml algorithm.n=8 lora.enabled=true
      memrl config show configs/memagent_grpo.yaml    # every setting
    """
    from memrl.dist.launch import RankDiedError, train
    from memrl.engines.base import EngineDeadError
    from memrl.train.guards import NothingTrainableError, RunFinished
    from memrl.train.signals import TrainingInterrupted
    from memrl.train.trainer import NonFiniteLossError

    _refuse_flags(config, overrides)
    keys = [k.strip() for k in (allow_changes or "").split(",") if k.strip()]
    cfg = resolve_config(config, overrides, {"trainer.allow_changes": keys or None})
    quiet_hub_progress()
    where = f"{cfg.trainer.output_dir}/checkpoints"
    try:
        with _run_lock(cfg):
            step, last = train(cfg)
    except RunFinished as done:
        typer.echo(str(done))
        return
    except TrainingInterrupted as stop:
        _fail(str(stop), stop.exit_code)
    except EngineDeadError as err:
        _fail(f"error: the engine died, stopping the run: {err} (metrics and checkpoints so far are in "
              f"{cfg.trainer.output_dir})", 1)
    except (NothingTrainableError, NonFiniteLossError, RankDiedError) as err:
        _fail(f"error: {err}", 1)
    if os.environ.get("RANK", "0") != "0":  # under torchrun every rank ran this command: rank 0 reports
        return
    if "reward" not in last:  # every episode of the last step failed: not a run to call done
        _fail(f"error: step {step} finished but none of its episodes completed "
              f"({last.get('failed_episodes', 0):.0f} failed episodes so far, see the warnings above); "
              f"checkpoints in {where}", 1)
    rollouts = Path(cfg.trainer.output_dir) / "rollouts"
    idle = int(last.get("idle_steps", 0))
    if idle:
        print(f"note: {idle} step(s) trained nothing and did not count toward trainer.total_steps="
              f"{cfg.trainer.total_steps}", file=sys.stderr)
    failed = int(last.get("failed_episodes", 0))  # a run that lost episodes says so where it says it is done
    lost = f", {failed} failed episode(s) (tracebacks in {cfg.trainer.output_dir}/failures)" if failed else ""
    typer.echo(f"done: step {step}, reward {last['reward']:.3f}{lost}; checkpoints in {where}, metrics in "
               f"{cfg.trainer.output_dir}/metrics.jsonl" + (f", rollouts in {rollouts}" if rollouts.is_dir() else ""))


OWN_FLAGS = ("--allow-changes", "--help")  # the options train_cmd declares


def _refuse_flags(config: Optional[Path], overrides: Optional[list[str]]) -> None:
    """``memrl train cfg.yaml --lr 1e-6`` (the command lets unknown options through to here): click answered
    "No such option: --lr (Possible options: --help)"; settings are overrides, so name the one meant."""
    from memrl.config.load import key_for

    args = ([str(config)] if config is not None else []) + list(overrides or [])
    for i, arg in enumerate(args):
        if not arg.startswith("-") or arg == "-":
            continue
        flag, _, value = arg.partition("=")
        near = difflib.get_close_matches(flag, OWN_FLAGS, n=1, cutoff=0.75)
        if near:  # a typo of the command's own option, not a setting
            raise ValueError(f"memrl train has no {flag} option; did you mean {near[0]}? (memrl train --help)")
        after = args[i + 1] if i + 1 < len(args) else ""
        value = value or (after if after and not after.startswith("-") and "=" not in after else "")
        key = key_for(flag.lstrip("-").replace("-", "_"))
        example = f"{key}={value or '...'}" if key else "trainer.lr=1e-6 (memrl config schema lists the keys)"
        raise ValueError(f"memrl train has no {flag} option: settings are key=value overrides after the config, "
                         f"e.g. {example}")


@contextlib.contextmanager
def _run_lock(cfg: Any) -> Iterator[None]:
    """One ``memrl train`` per trainer.output_dir (under torchrun, rank 0 holds it for every rank); the holder
    removes a dead run's online.json at once (agents must not be sent to its port while this run starts)."""
    from memrl.data.runlock import hold_folder
    from memrl.io.endpoint_file import drop_stale_address
    from memrl.train.preflight import check_output_dir

    if os.environ.get("RANK", "0") != "0":
        yield
        return
    out = Path(cfg.trainer.output_dir)
    check_output_dir(out)  # an unwritable folder says so, rather than failing on the lock file
    created = [p for p in (out, *out.absolute().parents) if not p.exists()]  # the folders the lock will make
    try:
        with hold_folder(out, "memrl train", "trainer.output_dir",
                         lambda msg: print(f"notice: {msg}", file=sys.stderr)):
            drop_stale_address(out)
            yield
    except BaseException:
        if created:  # a start that failed (a model that does not load): its recorded config is all the folder holds
            _drop_lone_config(out)
        raise
    finally:  # a run refused before it wrote anything leaves no empty folder behind
        for folder in created:  # deepest first; a folder with anything in it stays
            with contextlib.suppress(OSError):
                folder.rmdir()


def _drop_lone_config(out: Path) -> None:
    """Remove the config.yaml memrl recorded in a folder this start created, when nothing else is there: a run
    that failed before its first step would otherwise be listed as a run (``memrl view``) with nothing in it."""
    from memrl.train.preflight import RUN_CONFIG_HEADER

    path = out / "config.yaml"
    with contextlib.suppress(OSError, UnicodeDecodeError):
        if [p.name for p in out.iterdir()] == ["config.yaml"] and path.read_text().startswith(RUN_CONFIG_HEADER):
            path.unlink()


def _fail(message: str, code: int) -> NoReturn:
    """One line on stderr and a non-zero exit: the run ended for a reason that is not a bad setting."""
    print(message, file=sys.stderr)
    raise typer.Exit(code)


@user_errors
def export_cmd(
    run_dir: Path = typer.Argument(..., help="A training run folder (trainer.output_dir)."),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder for the plain Hugging Face model."),
    step: Optional[int] = typer.Option(None, "--step", help="Checkpoint step (default: latest)."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it holds an earlier "
                               "export (never a training run or files memrl did not write)."),
) -> None:
    """Write a plain HF model (LoRA merged, safetensors) that transformers and vLLM load as-is."""
    from memrl.train.export import export_run

    quiet_hub_progress()  # transformers' "Loading weights" / "Writing model shards" bars: noise here
    path = export_run(run_dir, out, step, force=force)
    typer.echo(f"exported {path}")


@user_errors
def plot_cmd(
    folders: list[Path] = typer.Argument(..., help="Training runs (metrics.jsonl) or `memrl eval --out` folders "
                                         "(results.json): one, or several of one kind to overlay."),
    out: Optional[Path] = typer.Option(None, "--out", help="PNG path (default FOLDER/curves.png for one folder; "
                                       "required for several)."),
    metric: Optional[list[str]] = typer.Option(None, "--metric", "-m", help="What to draw, repeatable. Runs: any "
                                               "metrics.jsonl key (default: reward, eval/accuracy, response_tokens, "
                                               "kl, entropy, grad_norm where present and not 0 throughout; reward and eval/accuracy always). "
                                               "Long-context evals: sub_em "
                                               "(default), em, f1. RULER evals: average (default) or a task."),
    smooth: int = typer.Option(1, "--smooth", help="Runs: also draw a trailing mean over this many steps (1: off)."),
    force: bool = typer.Option(False, "--force", help="Replace an --out file memrl did not write (a plot memrl "
                               "drew is replaced without it)."),
) -> None:
    """Plot training curves, or eval results against context length (pass^k against k), to PNG; several
    folders are overlaid (GRPO vs GiGPO, base vs trained) and a table prints their numbers.

    Examples: memrl plot runs/grpo runs/gigpo --out compare.png -m reward --smooth 5;
    memrl plot evals/base evals/trained --out accuracy.png
    """
    import errno

    if out is not None and out.suffix.lower() != ".png":  # also keeps it off the inputs (metrics.jsonl, results.json)
        raise ValueError(f"--out {out}: the plot is a PNG image; name a .png file")
    if out is not None:
        from memrl.io.own_files import check_replace

        check_replace(out, force)
    kinds = {_folder_kind(f) for f in folders}
    if len(kinds) > 1:
        raise ValueError("training runs and eval folders cannot be overlaid: plot them separately")
    if out is None and len(folders) > 1:
        raise ValueError(f"{len(folders)} folders: say where the comparison goes with --out PATH.png "
                         "(nothing is written into them)")
    target = out or folders[0] / "curves.png"
    try:
        if kinds == {"eval"}:
            if smooth != 1:
                raise ValueError("--smooth applies to training runs, not to eval folders")
            _plot_evals(folders, target, metric)
        else:
            _plot_runs(folders, target, metric, smooth)
    except OSError as exc:  # a read-only folder (a shared or archived one): say where to write instead
        if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        hint = "; write the plot elsewhere with --out PATH" if out is None else ""
        raise ValueError(f"{target}: cannot write the plot ({exc.strerror.lower()}){hint}") from None


def _folder_kind(folder: Path) -> str:
    if (folder / "metrics.jsonl").is_file():
        return "run"
    if (folder / "results.json").is_file():
        return "eval"
    if (folder / "eval_config.yaml").is_file():  # an eval that stopped before its results were summed up
        raise ValueError(f"{folder}: an eval folder without results.json (interrupted, or nothing finished yet): "
                         "run the same memrl eval command again to finish it, then plot")
    raise ValueError(f"{folder}: neither a training run (no metrics.jsonl) nor an eval folder (no results.json)")


def _plot_runs(folders: list[Path], target: Path, metric: Optional[list[str]], smooth: int) -> None:
    from memrl.train.plots import plot_runs

    path, rows, keys = plot_runs(folders, target, metric, smooth)
    typer.echo(f"wrote {path}")
    _print_table(["run", "steps", *keys], rows)


def _plot_evals(folders: list[Path], target: Path, metric: Optional[list[str]]) -> None:
    from memrl.eval.compare_plot import plot_evals

    path, tables = plot_evals(folders, target, metric)
    typer.echo(f"wrote {path}")
    for name, head, rows in tables:
        typer.echo(f"{name} (%):")
        _print_table(head, rows)


def _print_table(head: list[str], rows: list[list[str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in head:
        table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(*row)
    Console(width=max(100, 26 * len(head))).print(table)
