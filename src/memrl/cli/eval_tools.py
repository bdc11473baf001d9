"""``memrl eval --workflow tool_agent``: the tasks of one or more domains, K trials each, pass^k.

With several domains (``--domain airline,retail,telecom``) each one is evaluated into its own
folder ``OUT/<domain>/`` (results, transcripts, rollouts, ``tau2_results.json``), one after the
other with the same model, and ``OUT/leaderboard.json`` / ``leaderboard.md`` hold the τ²-bench
leaderboard's view of them: pass^1..4 per domain in percent and the Overall mean
(:mod:`memrl.eval.leaderboard`). With one domain the folder is ``OUT`` itself.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

LEADERBOARD_OUTPUTS = ("leaderboard.json", "leaderboard.md")


def with_domain(cfg: Any, domain: str) -> Any:
    """``cfg`` with ``env.domain`` set (validated: an unknown domain is a one-line error)."""
    from pydantic import ValidationError

    data = cfg.model_dump()
    data["env"]["domain"] = domain
    try:
        return type(cfg).model_validate(data)
    except ValidationError as err:
        raise ValueError(f"--domain {domain}: {err.errors()[0]['msg'].removeprefix('Value error, ')}") from None


def side_models(cfg: Any) -> str:
    """The banner's words on the user simulator and the judge (what a reader of the run needs to compare it)."""
    e = cfg.env
    user = "solo (no user)" if e.solo else f"user {e.user.model} ({e.user.protocol}, temperature {e.user.temperature})"
    judge = f"judge {e.judge.model} ({e.judge.protocol})" if e.judge.model else "NL assertions not judged"
    w = cfg.workflow
    limits = [f"{w.max_turns} turns"] + [f"{n:g} {what}" for n, what in (
        (w.max_steps, "steps"), (w.max_errors, "tool errors"), (w.timeout_s, "s")) if n]
    return f" · {user} · {judge} · prompts {e.prompts} · seeds {w.seeds} · ends at {', '.join(limits)}"


def chat_tokenizer(cfg: Any) -> Any:
    """The tokenizer of an eval over a chat API (``tool_protocol=openai_chat``): ``model.tokenizer`` if given,
    else none (its episodes hold no tokens, and ``--model`` may name a model with no tokenizer, gpt-4.1)."""
    from memrl.models.resolve import load_tokenizer

    return load_tokenizer(cfg.model.tokenizer, field="model.tokenizer") if cfg.model.tokenizer else None


def _check_domain(cfg: Any) -> list[Any]:
    """The eval samples; a bad domain, data dir, split or mode fails here, before any model loads."""
    from memrl.envs.domain import load_domain
    from memrl.workflows import load_samples

    load_domain(cfg.env.domain, cfg.env.data_dir, tool_options=cfg.env.tool_options,
                prompts=cfg.env.prompts).new_env(solo=cfg.env.solo)
    return load_samples(cfg, "eval")


def _tau2_scoring(cfg: Any, console: Console) -> Any:
    """The eval scores τ²-bench's all-or-nothing reward: env.reward / env.partial_credit are training rewards (with
    them, pass^k, the average reward and tau2_results.json were not τ²-bench's numbers, and nothing said so)."""
    if cfg.env.reward == "tau2" and not cfg.env.partial_credit:
        return cfg
    console.print(f"note: memrl eval scores τ²-bench's reward; env.reward={cfg.env.reward} and env.partial_credit="
                  f"{str(cfg.env.partial_credit).lower()} are training rewards and are not used here",
                  highlight=False, soft_wrap=True)
    return cfg.model_copy(update={"env": cfg.env.model_copy(update={"reward": "tau2", "partial_credit": False})})


def eval_tools(cfg: Any, out: Path, trials: int, restart: bool, console: Console, *, rollouts: bool = True,
               domains: list[str] | None = None) -> None:
    """Run the tool-agent eval under a progress bar and print pass^k (``rollouts``: also write rollout records)."""
    from memrl.cli.eval_common import prepare_out, run_with_progress
    from memrl.engines.factory import build_engine
    from memrl.eval.tool_eval import TOOL_EVAL_OUTPUTS, run_tool_eval
    from memrl.models.resolve import config_tokenizer
    from memrl.train.preflight import check_tool_prompt_budget

    if trials < 1:
        raise ValueError(f"--trials must be >= 1, got {trials}")
    if trials > 1 and cfg.sampling.temperature == 0:
        console.print(f"[yellow]warning: --trials {trials} with greedy decoding repeats the same episode; "
                      "set --temperature for pass^k to mean anything[/yellow]", highlight=False)
    cfg = _tau2_scoring(cfg, console)
    names = domains or [cfg.env.domain]
    if len(set(names)) != len(names):
        raise ValueError(f"--domain names a domain twice: {','.join(names)}")
    single = len(names) == 1
    runs = [(with_domain(cfg, d), out if single else out / d) for d in names]
    samples = [_check_domain(c) for c, _ in runs]
    counts = [len(s) for s in samples]
    tokenizer = chat_tokenizer(cfg) if cfg.workflow.tool_protocol == "openai_chat" else \
        config_tokenizer(cfg.model)
    for (c, _), s in zip(runs, samples):
        check_tool_prompt_budget(c, tokenizer, s, lambda msg: console.print(
            f"[yellow]warning: {msg}[/yellow]", highlight=False))
    prepare_out(out, restart, (*TOOL_EVAL_OUTPUTS, *LEADERBOARD_OUTPUTS) if single else (*names, *LEADERBOARD_OUTPUTS),
                cfg if single else None)
    for c, folder in runs if not single else ():
        prepare_out(folder, restart, TOOL_EVAL_OUTPUTS, c)
    eng = build_engine(cfg)
    console.print(f"eval tool_agent · model {cfg.model.path} · engine {cfg.engine.kind} · "
                  + ", ".join(f"{c.env.domain} ({n} tasks)" for (c, _), n in zip(runs, counts))
                  + f" · split {cfg.env.eval_split} · {trials} trial(s) · temperature {cfg.sampling.temperature}"
                  + side_models(cfg), highlight=False)

    async def run_all(started: Any, advance: Any) -> dict[str, Any]:
        total, done_before, results = sum(counts) * trials, 0, {}
        for (c, folder), n in zip(runs, counts):
            def start(_total: int, done: int, base: int = done_before) -> None:
                started(total, base + done)

            results[c.env.domain] = await run_tool_eval(c, eng, tokenizer, folder, trials, on_start=start,
                                                        on_episode=advance, rollouts=rollouts)
            done_before += n * trials
        return results

    by_domain = run_with_progress(console, out, eng, run_all, noun="trials")
    for (c, folder), results in zip(runs, by_domain.values()):
        _report(console, c, folder, results)
    board = _write_leaderboard(out, by_domain)
    if not single:
        typer.echo(board)
    where = "" if single else "<domain>/"
    console.print(f"wrote {out}/leaderboard.json, leaderboard.md; {out}/{where}results.json, results.md, "
                  "tau2_results.json (tau2 view --file / tau2 evaluate-trajs read it), transcripts/"
                  + (" and rollouts/ (memrl view / memrl rft read them)" if rollouts else ""), highlight=False)
    sys.stdout.flush()


def _report(console: Console, cfg: Any, folder: Path, results: dict[str, Any]) -> None:
    """A domain's pass^k table and what went wrong in its trials."""
    from memrl.eval.tool_eval import tool_results_markdown

    typer.echo(tool_results_markdown(results))
    cut = (results.get("endings") or {}).get("prompt_too_long", 0)
    if cut:
        console.print(f"[yellow]{cfg.env.domain}: {cut} trial(s) ended before the agent's first turn "
                      f"(prompt_too_long): the prompt exceeds workflow.options.max_total_tokens="
                      f"{cfg.workflow.max_total_tokens}; raise it[/yellow]", highlight=False)
    if results["failed_trials"]:
        console.print(f"[yellow]{cfg.env.domain}: {results['failed_trials']} trial(s) failed and are not scored; "
                      f"see {folder}/failures/ and re-run the same command to retry them[/yellow]", highlight=False)


def _write_leaderboard(out: Path, by_domain: dict[str, Any]) -> str:
    """``OUT/leaderboard.json`` and ``.md``; returns the markdown."""
    import json

    from memrl.io.atomic import atomic_write
    from memrl.eval.leaderboard import leaderboard, leaderboard_markdown

    board = leaderboard(by_domain)
    with atomic_write(out / "leaderboard.json") as fh:
        json.dump(board, fh, indent=1)
    text = leaderboard_markdown(board)
    with atomic_write(out / "leaderboard.md") as fh:
        fh.write(text)
    return text
