"""``memrl eval --workflow tool_agent``: the tasks of a domain split, K trials each, pass^k."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def eval_tools(cfg: Any, out: Path, trials: int, restart: bool, console: Console) -> None:
    from memrl.data.outdir import check_writable_dir, clear_outputs, record_outputs
    from memrl.engines.base import EngineDeadError
    from memrl.engines.factory import build_engine
    from memrl.eval.runner import AllEpisodesFailedError, check_resume
    from memrl.eval.tool_eval import TOOL_EVAL_OUTPUTS, run_tool_eval, tool_results_markdown
    from memrl.models.resolve import load_tokenizer
    from memrl.workflows import load_samples

    if trials < 1:
        raise ValueError(f"--trials must be >= 1, got {trials}")
    if trials > 1 and cfg.sampling.temperature == 0:
        console.print(f"[yellow]warning: --trials {trials} with greedy decoding repeats the same episode; "
                      "set --temperature for pass^k to mean anything[/yellow]", highlight=False)
    count = len(load_samples(cfg, "eval"))  # a bad domain, data dir or split fails before the model loads
    check_writable_dir(out)
    if restart:
        clear_outputs(out, "--restart")
    record_outputs(out, TOOL_EVAL_OUTPUTS)
    check_resume(out, cfg)
    columns = (TextColumn("[bold]eval"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    try:
        tokenizer = load_tokenizer(cfg.model.tokenizer or cfg.model.path)
        eng = build_engine(cfg)
        console.print(f"eval tool_agent · model {cfg.model.path} · engine {cfg.engine.kind} · domain "
                      f"{cfg.env.domain} split {cfg.env.eval_split} ({count} tasks) · {trials} trial(s) · "
                      f"temperature {cfg.sampling.temperature}", highlight=False)
        with Progress(*columns, console=console) as progress:
            bar = progress.add_task("eval", total=None)

            def started(total: int, done: int) -> None:
                progress.update(bar, total=total, completed=done)
                if done:
                    console.print(f"resuming: {done} of {total} trials already done")

            async def main() -> dict:
                try:
                    return await run_tool_eval(cfg, eng, tokenizer, out, trials, on_start=started,
                                               on_episode=lambda: progress.advance(bar))
                finally:
                    await eng.close()

            results = asyncio.run(main())
    except KeyboardInterrupt:
        console.print(f"interrupted — re-run the same command to resume (finished trials are kept in {out})",
                      highlight=False, markup=False)
        raise typer.Exit(130) from None
    except (EngineDeadError, AllEpisodesFailedError) as exc:
        console.print(f"error: {exc}; finished trials are kept in {out}, re-run the same command to resume",
                      highlight=False, markup=False)
        raise typer.Exit(1) from None
    typer.echo(tool_results_markdown(results))
    console.print(f"wrote {out}/results.json, results.md and transcripts/ (one conversation per trial)",
                  highlight=False)
    if results["failed_trials"]:
        console.print(f"[yellow]{results['failed_trials']} trial(s) failed and are not scored; see {out}/failures/ "
                      "and re-run the same command to retry them[/yellow]", highlight=False)
    sys.stdout.flush()
