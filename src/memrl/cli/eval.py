"""``memrl eval``: accuracy of a workflow across context lengths."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from memrl.cli.common import given_keys, quiet_hub_progress, resolve_config
from memrl.cli.data import parse_docs
from memrl.cli.eval_common import out_lock, prepare_out, run_with_progress
from memrl.cli.errors import user_errors
from memrl.io.console import log_console


@user_errors
def eval_cmd(
    config: Optional[Path] = typer.Argument(None, help="YAML config (optional)."),
    overrides: Optional[list[str]] = typer.Argument(None, help="Dotted overrides, e.g. workflow.options.chunk_tokens=2000."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model folder, hub id or alias "
                                        "(tiny, smollm2-135m-instruct). With --engine openai: the tokenizer "
                                        "source and default served model name (a tool agent over "
                                        "tool_protocol=openai_chat loads no tokenizer: any served name, "
                                        "e.g. gpt-4.1-2025-04-14)."),
    workflow: Optional[str] = typer.Option(None, "--workflow", "-w", help="memagent | rememr1 | full_context | "
                                           "tool_agent (tasks of --domain/--split, --trials each, pass^k) | agent "
                                           "(a program: workflow.options.program or command), or your own as "
                                           "package.module:Class."),
    data: Optional[Path] = typer.Option(None, "--data", help="Folder with eval_{N}.json files (from memrl data synth) or "
                              "ReMemR1's eval_{dataset}_{N}.json; also a prefix (DIR/eval_hotpotqa) or a pattern "
                              "with {n} (min-distance files); --suite ruler: the RULER data folder; or one file of samples "
                              "(JSONL, JSON or parquet) for any workflow."),
    docs: Optional[str] = typer.Option(None, "--docs", "-d", help="Comma-separated document counts to evaluate "
                                       "(--suite qa on a folder of eval_{N}.json files; not with --data FILE); "
                                       "--suite ruler: context lengths (default: all)."),
    suite: str = typer.Option("qa", "--suite", help="qa (long-context QA files) | ruler (RULER tasks)."),
    tasks: Optional[str] = typer.Option(None, "--tasks", help="--suite ruler: comma-separated task names "
                                        "(default: all)."),
    engine: Optional[str] = typer.Option(None, "--engine", "-e", help="hf (in-process, default) | openai | vllm."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="openai engine: server URL ending in /v1."),
    out: Path = typer.Option(Path("runs/eval"), "--out", "-o", help="Results folder; re-running resumes."),
    max_samples: Optional[int] = typer.Option(None, "--max-samples", help="First K samples of each file (K >= 1)."),
    temperature: Optional[float] = typer.Option(None, "--temperature", help="Overrides sampling.temperature; "
                                                "unset everywhere: 0 = greedy (protocol memrl) or 0.7 "
                                                "(protocols memagent, rememr1)."),
    top_p: Optional[float] = typer.Option(None, "--top-p", help="Overrides sampling.top_p (default 1.0; 0.95 "
                                          "under protocols memagent, rememr1)."),
    protocol: Optional[str] = typer.Option(None, "--protocol", help="eval.protocol: memrl (one-way sub-EM, default) "
                                           "| memagent | rememr1 (the papers' scripts: bidirectional sub-EM "
                                           "against the first gold; sampled at 0.7 / 0.95 over whole contexts "
                                           "unless a flag or override says otherwise)."),
    repeats: Optional[int] = typer.Option(None, "--repeats", help="eval.repeats: K samples per question; "
                                          "reports mean accuracy and pass@K (MemAgent's --sampling)."),
    domain: Optional[str] = typer.Option(None, "--domain", help="tool_agent: env.domain (library, mock, retail, "
                                         "airline, telecom, telecom-workflow, or package.module:factory); several "
                                         "comma-separated (airline,retail,telecom): one folder each in --out and "
                                         "the tau2 leaderboard's Overall."),
    split: Optional[str] = typer.Option(None, "--split", help="tool_agent: env.eval_split (e.g. test, small, base)."),
    data_dir: Optional[str] = typer.Option(None, "--data-dir", help="tool_agent: env.data_dir (a tau2-bench clone "
                                           "or its domains folder)."),
    trials: int = typer.Option(1, "--trials", help="tool_agent: episodes per task; reports pass^1..pass^K."),
    task_ids: Optional[str] = typer.Option(None, "--task-ids", help="tool_agent: only these tasks of --split, "
                                           "comma-separated (env.task_ids; tau2-bench's --task-ids)."),
    num_tasks: Optional[int] = typer.Option(None, "--num-tasks", min=1, help="tool_agent: the first N tasks of "
                                            "--split (env.num_tasks; tau2-bench's --num-tasks)."),
    max_retries: Optional[int] = typer.Option(None, "--max-retries", min=0, help="tool_agent: eval.max_retries, "
                                              "tries again at once of a trial that fails (tau2-bench's "
                                              "--max-retries; memrl's default 0: a failed trial waits for the "
                                              "next run)."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help="Episodes in flight at once."),
    rollouts: bool = typer.Option(True, "--rollouts/--no-rollouts", help="Also save each episode's tokens and "
                                  "log-probs as a rollout record in OUT/rollouts/ (what memrl sft/rft and memrl view "
                                  "read); --no-rollouts for long contexts where they are large."),
    restart: bool = typer.Option(False, "--restart", help="Delete earlier results in --out first (only what "
                                 "memrl wrote there; refuses if the folder holds anything else)."),
) -> None:
    """Evaluate a workflow on long-context QA files (eval_{N}.json), RULER, tool-agent tasks or one file of samples.

    Writes results.json, results.md (with accuracy.png for QA), transcripts and rollouts to --out.

    Interrupted runs resume: finished episodes are kept and skipped; failed ones are tried again.

    Examples:

      memrl eval -m model/ -w memagent --data data/hqa --docs 50,200 -o e1
      memrl eval -m model/ -w memagent --suite ruler --data data/ruler
      memrl eval -m tiny -w tool_agent --domain library --trials 4 --temperature 1
    """
    if max_samples is not None and max_samples < 1:
        raise ValueError(f"--max-samples must be >= 1 (leave it out for all samples), got {max_samples}")
    from memrl.eval.runner import recorded_settings, with_eval_sampling

    if suite not in ("qa", "ruler"):
        raise ValueError(f"--suite must be qa or ruler, got {suite!r}")
    domains = [d.strip() for d in domain.split(",") if d.strip()] if domain else None
    flags = {
        "model.path": model, "workflow.name": workflow, "engine.kind": engine, "engine.base_url": base_url,
        "sampling.temperature": temperature, "sampling.top_p": top_p, "engine.concurrency": concurrency,
        "eval.protocol": protocol, "eval.repeats": repeats, "env.domain": domains[0] if domains else None,
        "env.eval_split": split, "env.data_dir": data_dir, "env.num_tasks": num_tasks, "eval.max_retries": max_retries,
        "env.task_ids": [t.strip() for t in task_ids.split(",") if t.strip()] if task_ids else None,
    }
    recorded = None if restart else recorded_settings(out)
    cfg = with_eval_sampling(resolve_config(config, overrides, flags),  # re-scoring a folder keeps its sampling
                             recorded, given_keys(config, overrides, flags))
    built = cfg.workflow.build()
    on_tasks = built.uses_env  # a tool agent: every task of --domain, --trials each
    _check_flags_apply(on_tasks, {  # first: a flag the workflow ignores is the error, not whether its file exists
        "--data": data, "--docs": docs, "--max-samples": max_samples, "--tasks": tasks,
        "--suite": None if suite == "qa" else suite, "--repeats": repeats}, trials,
        {"--task-ids": task_ids, "--num-tasks": num_tasks, "--max-retries": max_retries, "--domain": domain,
         "--split": split, "--data-dir": data_dir})
    _check_data_exists(data, built)
    if data is not None and data.is_file() and (docs or tasks):
        flag = "--docs" if docs else "--tasks"
        raise ValueError(f"{flag} applies to a folder of eval files (eval_<N>.json, RULER's); --data {data} is one "
                         f"file of samples, evaluated whole: leave {flag} out (--max-samples K takes the first K)")
    quiet_hub_progress()
    console = log_console()
    if "path" not in cfg.model.model_fields_set:  # neither --model, an override nor the config file named one
        console.print(f"[yellow]warning: no --model: evaluating model.path's default {cfg.model.path!r}, memrl's "
                      "randomly initialised test model (its scores mean nothing); pass --model[/yellow]",
                      highlight=False)
    if cfg.eval.repeats > 1 and cfg.sampling.temperature == 0:
        console.print(f"[yellow]warning: eval.repeats={cfg.eval.repeats} with greedy decoding gives the same "
                      "answer every time; set --temperature[/yellow]", highlight=False)
    from memrl.eval.protocol_settings import client_sampling_note, own_prompts_note, variant_note

    for note in (client_sampling_note(cfg, recorded), own_prompts_note(cfg), variant_note(cfg)):
        if note:
            console.print(f"[yellow]{note}[/yellow]", highlight=False, soft_wrap=True)
    with out_lock(out, console):
        if on_tasks:
            from memrl.cli.eval_tools import eval_tools

            eval_tools(cfg, out, trials, restart, console, rollouts=rollouts, domains=domains)
            return
        if (data is None and cfg.data.eval_file) or (data is not None and data.is_file()):
            from memrl.cli.eval_workflow import eval_file

            eval_file(cfg, data, out, restart, console, rollouts, max_samples)  # one file of the workflow's own samples
            return
        if data is None:
            raise ValueError("--data: give the folder of eval files (memrl data synth --out, or memrl data ruler "
                             "--out), or one file of samples (or set data.eval_file)")
        if suite == "ruler":
            if cfg.eval.repeats > 1:  # it ran each sample once and reported that as K repeats' worth
                raise ValueError(f"eval.repeats={cfg.eval.repeats}: the RULER suite runs each sample once; leave "
                                 "--repeats out (or give --samples more per task with memrl data ruler)")
            _ruler(cfg, data, docs, tasks, out, max_samples, restart, console)
            return
        _qa(cfg, data, docs, out, max_samples, restart, console, rollouts)


def _check_data_exists(data: Path | None, workflow: Any) -> None:
    """A --data path that names nothing, refused as such (a workflow reading its own file of samples was sent
    on to the QA suite, which asked for --docs). A QA prefix or ``{n}`` pattern names files, not itself."""
    from memrl.eval.files import EXTENSIONS
    from memrl.workflows.builtins import QAWorkflow

    if data is None or data.exists() or "{n}" in str(data):
        return
    if not isinstance(workflow, QAWorkflow) or data.suffix.lstrip(".") in EXTENSIONS:
        raise ValueError(f"--data {data}: no such file")


def _check_flags_apply(tools: bool, qa_flags: dict[str, object], trials: int,
                       task_flags: dict[str, object] | None = None) -> None:
    """Refuse flags the chosen workflow would silently ignore (one line naming the flag)."""
    given = [flag for flag, value in qa_flags.items() if value is not None]
    if tools and given:
        raise ValueError(f"{given[0]} does not apply to --workflow tool_agent, which runs every task of --domain "
                         f"--split (--trials times each); leave {given[0]} out (choose the tasks with --split, "
                         "--task-ids or --num-tasks)")
    only_tasks = [flag for flag, value in (task_flags or {}).items() if value is not None]
    if not tools and only_tasks:
        raise ValueError(f"{only_tasks[0]} applies to --workflow tool_agent only; for the first K samples of each "
                         "file use --max-samples K")
    if not tools and trials != 1:
        raise ValueError("--trials applies to --workflow tool_agent only; for K samples per question use "
                         "--repeats K")


def _qa(cfg: Any, data: Path, docs: str | None, out: Path, max_samples: int | None, restart: bool,
        console: Console, rollouts: bool) -> None:
    """``--suite qa``: eval_{N} files of long-context questions (``--docs`` are document counts)."""
    from memrl.engines.factory import build_engine
    from memrl.eval.files import data_record
    from memrl.eval.report import failed_total, markdown_table
    from memrl.eval.runner import EVAL_OUTPUTS, read_eval_files, run_eval
    from memrl.models.resolve import config_tokenizer

    sizes = parse_docs(docs) if docs else []
    if not sizes:
        raise ValueError(_no_docs(data))
    files = read_eval_files(data, sizes, max_samples)  # a missing file or a bad row: before the model loads
    prepare_out(out, restart, EVAL_OUTPUTS, cfg,  # a file changed since its results were written is refused
                {"by_docs": {str(n): data_record(path) for n, (path, _) in files.items()}})
    tokenizer = config_tokenizer(cfg.model)
    eng = build_engine(cfg)
    s = cfg.sampling
    console.print(f"eval {cfg.workflow.name} · model {cfg.model.path} · engine {cfg.engine.kind} · "
                  f"docs {sizes} · protocol {cfg.eval.protocol} · temperature {s.temperature} top_p {s.top_p}"
                  + (f" · {cfg.eval.repeats} repeats" if cfg.eval.repeats > 1 else ""), highlight=False)
    results = run_with_progress(console, out, eng, lambda started, advance: run_eval(
        cfg, eng, tokenizer, data, sizes, out, max_samples=max_samples, on_start=started, on_episode=advance,
        rollouts=rollouts, files=files))
    typer.echo(markdown_table(results))
    earlier = [n for n in results["by_docs"] if int(n) not in sizes]
    if earlier:
        console.print(f"note: the results also report {', '.join(earlier)} documents, finished by an earlier run "
                      f"in {out} (--restart starts the folder afresh)", highlight=False)
    console.print(f"wrote {out}/results.json, results.md, accuracy.png, transcripts/"
                  + (" and rollouts/ (memrl view / memrl rft read them)" if rollouts else ""), highlight=False)
    failed = failed_total(results)
    if failed:
        console.print(f"[yellow]{failed} episode(s) failed and are not counted in the accuracy; see {out}/failures/ "
                      "and re-run the same command to retry them[/yellow]", highlight=False)
    sys.stdout.flush()


def _no_docs(data: Path) -> str:
    """What to say when --docs names no document count: the counts --data has files for, or why none."""
    import re

    folder, stem = (data, "eval") if data.is_dir() else (data.parent, data.name)  # a folder, or a name prefix
    files = sorted(folder.glob(f"{stem}_*")) if folder.is_dir() and "{n}" not in stem else []
    counts = sorted({int(m.group(1)) for p in files if (m := re.search(r"_(\d+)\.\w+$", p.name))})
    if not data.exists() and not counts:
        return f"--data {data}: no such folder (nor {stem}_<N>.json files in {folder})"
    if not counts:
        return (f"--docs: give the document counts to evaluate; {data} has no eval_<N> files (memrl data synth "
                f"--out {data} writes them)")
    return (f"--docs: give the document counts to evaluate, e.g. --docs {','.join(map(str, counts))} "
            f"({data} has eval files for {', '.join(map(str, counts))} documents)")


def _ruler(cfg: object, data: Path, docs: str | None, tasks: str | None, out: Path, max_samples: int | None,
           restart: bool, console: Console) -> None:
    """``--suite ruler``: the RULER task suite (``--docs`` are context lengths in tokens)."""
    try:
        from memrl.eval.ruler_suite import RULER_OUTPUTS, markdown_table, run_ruler_suite
    except ImportError as exc:
        console.print(f"error: --suite ruler is not available in this memrl ({exc})", highlight=False, markup=False)
        raise typer.Exit(1) from None
    from memrl.engines.factory import build_engine
    from memrl.models.resolve import config_tokenizer

    lengths = parse_docs(docs) if docs else None
    names = [t.strip() for t in tasks.split(",") if t.strip()] if tasks else None
    prepare_out(out, restart, RULER_OUTPUTS)
    tokenizer = config_tokenizer(cfg.model)  # type: ignore[attr-defined]
    eng = build_engine(cfg)  # type: ignore[arg-type]
    results = run_with_progress(console, out, eng, lambda started, advance: run_ruler_suite(
        cfg, eng, tokenizer, data, out, lengths=lengths, tasks=names, max_samples=max_samples,  # type: ignore[arg-type]
        on_start=started, on_episode=advance))
    typer.echo(markdown_table(results))
    console.print(f"wrote {out}/results.json, results.md and transcripts/", highlight=False)
