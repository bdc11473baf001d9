"""``memrl eval --workflow tool_agent``: the tasks of a domain split, K trials each, pass^k."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console


def eval_tools(cfg: Any, out: Path, trials: int, restart: bool, console: Console, *, rollouts: bool = True) -> None:
    """Run the tool-agent eval under a progress bar and print pass^k (``rollouts``: also write rollout records)."""
    from memrl.cli.eval_common import prepare_out, run_with_progress
    from memrl.engines.factory import build_engine
    from memrl.eval.tool_eval import TOOL_EVAL_OUTPUTS, run_tool_eval, tool_results_markdown
    from memrl.models.resolve import load_tokenizer
    from memrl.train.preflight import check_tool_prompt_budget
    from memrl.workflows import load_samples

    if trials < 1:
        raise ValueError(f"--trials must be >= 1, got {trials}")
    if trials > 1 and cfg.sampling.temperature == 0:
        console.print(f"[yellow]warning: --trials {trials} with greedy decoding repeats the same episode; "
                      "set --temperature for pass^k to mean anything[/yellow]", highlight=False)
    samples = load_samples(cfg, "eval")  # a bad domain, data dir or split fails before the model loads
    count = len(samples)
    tokenizer = load_tokenizer(cfg.model.tokenizer or cfg.model.path)
    check_tool_prompt_budget(cfg, tokenizer, samples, lambda msg: console.print(
        f"[yellow]warning: {msg}[/yellow]", highlight=False))
    prepare_out(out, restart, TOOL_EVAL_OUTPUTS, cfg)
    eng = build_engine(cfg)
    console.print(f"eval tool_agent · model {cfg.model.path} · engine {cfg.engine.kind} · domain "
                  f"{cfg.env.domain} split {cfg.env.eval_split} ({count} tasks) · {trials} trial(s) · "
                  f"temperature {cfg.sampling.temperature}", highlight=False)
    results = run_with_progress(console, out, eng, lambda started, advance: run_tool_eval(
        cfg, eng, tokenizer, out, trials, on_start=started, on_episode=advance, rollouts=rollouts), noun="trials")
    typer.echo(tool_results_markdown(results))
    console.print(f"wrote {out}/results.json, results.md, transcripts/ (one conversation per trial)"
                  + (" and rollouts/ (memrl view / memrl rft read them)" if rollouts else ""), highlight=False)
    cut = (results.get("endings") or {}).get("prompt_too_long", 0)
    if cut:
        console.print(f"[yellow]{cut} trial(s) ended before the agent's first turn (prompt_too_long): the prompt "
                      f"exceeds workflow.max_total_tokens={cfg.workflow.max_total_tokens}; raise it[/yellow]",
                      highlight=False)
    if results["failed_trials"]:
        console.print(f"[yellow]{results['failed_trials']} trial(s) failed and are not scored; see {out}/failures/ "
                      "and re-run the same command to retry them[/yellow]", highlight=False)
    sys.stdout.flush()
