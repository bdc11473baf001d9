"""``memrl eval``: accuracy of a workflow across context lengths."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from memrl.cli.common import given_keys, quiet_hub_progress, resolve_config
from memrl.cli.data import parse_docs
from memrl.cli.eval_common import out_lock, prepare_out, run_with_progress
from memrl.cli.eval_flags import (
    BaseUrlFlag, ConcurrencyFlag, ConfigArg, DataDirFlag, DataFlag, DocsFlag, DomainFlag, EngineFlag, EvalArgs,
    MaxRetriesFlag, MaxSamplesFlag, ModelFlag, NumTasksFlag, OutFlag, OverridesArg, ProtocolFlag, RepeatsFlag,
    RestartFlag, RolloutsFlag, SplitFlag, SuiteFlag, TaskIdsFlag, TasksFlag, TemperatureFlag, TopPFlag, TrialsFlag,
    WorkflowFlag,
)
from memrl.cli.errors import user_errors
from memrl.io.console import log_console


@user_errors
def eval_cmd(
    config: ConfigArg = None,
    overrides: OverridesArg = None,
    model: ModelFlag = None,
    workflow: WorkflowFlag = None,
    data: DataFlag = None,
    docs: DocsFlag = None,
    suite: SuiteFlag = "qa",
    tasks: TasksFlag = None,
    engine: EngineFlag = None,
    base_url: BaseUrlFlag = None,
    out: OutFlag = Path("runs/eval"),
    max_samples: MaxSamplesFlag = None,
    temperature: TemperatureFlag = None,
    top_p: TopPFlag = None,
    protocol: ProtocolFlag = None,
    repeats: RepeatsFlag = None,
    domain: DomainFlag = None,
    split: SplitFlag = None,
    data_dir: DataDirFlag = None,
    trials: TrialsFlag = 1,
    task_ids: TaskIdsFlag = None,
    num_tasks: NumTasksFlag = None,
    max_retries: MaxRetriesFlag = None,
    concurrency: ConcurrencyFlag = None,
    rollouts: RolloutsFlag = True,
    restart: RestartFlag = False,
) -> None:
    """Evaluate a workflow on long-context QA files (eval_{N}.json), RULER, tool-agent tasks or one file of samples.

    Writes results.json, results.md (with accuracy.png for QA), transcripts and rollouts to --out.

    Interrupted runs resume: finished episodes are kept and skipped; failed ones are tried again.

    Examples:

      memrl eval -m model/ -w memagent --data data/hqa --docs 50,200 -o e1
      memrl eval -m model/ -w memagent --suite ruler --data data/ruler
      memrl eval -m tiny -w tool_agent --domain library --trials 4 --temperature 1
    """
    args = EvalArgs(**locals())
    if max_samples is not None and max_samples < 1:
        raise ValueError(f"--max-samples must be >= 1 (leave it out for all samples), got {max_samples}")
    if suite not in ("qa", "ruler"):
        raise ValueError(f"--suite must be qa or ruler, got {suite!r}")
    from memrl.eval.runner import recorded_settings, with_eval_sampling

    flags = args.config_flags()
    recorded = None if restart else recorded_settings(out)
    cfg = with_eval_sampling(resolve_config(config, overrides, flags),  # re-scoring a folder keeps its sampling
                             recorded, given_keys(config, overrides, flags))
    built = cfg.workflow.build()
    _check_args(args, built)
    quiet_hub_progress()
    console = log_console()
    _warn(cfg, recorded, console)
    with out_lock(out, console):
        _dispatch(args, cfg, built.uses_env, console)


def _check_args(a: EvalArgs, built: Any) -> None:
    """Flags the chosen workflow would ignore, then a --data that names nothing: before the model loads."""
    _check_flags_apply(built.uses_env, {  # first: a flag the workflow ignores is the error, not whether its file exists
        "--data": a.data, "--docs": a.docs, "--max-samples": a.max_samples, "--tasks": a.tasks,
        "--suite": None if a.suite == "qa" else a.suite, "--repeats": a.repeats}, a.trials,
        {"--task-ids": a.task_ids, "--num-tasks": a.num_tasks, "--max-retries": a.max_retries, "--domain": a.domain,
         "--split": a.split, "--data-dir": a.data_dir})
    _check_data_exists(a.data, built)
    if a.data is not None and a.data.is_file() and (a.docs or a.tasks):
        flag = "--docs" if a.docs else "--tasks"
        raise ValueError(f"{flag} applies to a folder of eval files (eval_<N>.json, RULER's); --data {a.data} is one "
                         f"file of samples, evaluated whole: leave {flag} out (--max-samples K takes the first K)")


def _warn(cfg: Any, recorded: Any, console: Console) -> None:
    """Settings that make the scores mean little (no --model, repeats of greedy decoding), and protocol notes."""
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


def _dispatch(a: EvalArgs, cfg: Any, on_tasks: bool, console: Console) -> None:
    """Run the suite the flags chose: tool-agent tasks, one file of samples, RULER or QA files by document count."""
    data = a.data
    if on_tasks:  # a tool agent: every task of --domain, --trials each
        from memrl.cli.eval_tools import eval_tools

        eval_tools(cfg, a.out, a.trials, a.restart, console, rollouts=a.rollouts, domains=a.domains)
    elif (data is None and cfg.data.eval_file) or (data is not None and data.is_file()):
        from memrl.cli.eval_workflow import eval_file

        eval_file(cfg, data, a.out, a.restart, console, a.rollouts, a.max_samples)  # the workflow's own samples
    elif data is None:
        raise ValueError("--data: give the folder of eval files (memrl data synth --out, or memrl data ruler "
                         "--out), or one file of samples (or set data.eval_file)")
    elif a.suite == "ruler":
        if cfg.eval.repeats > 1:  # it ran each sample once and reported that as K repeats' worth
            raise ValueError(f"eval.repeats={cfg.eval.repeats}: the RULER suite runs each sample once; leave "
                             "--repeats out (or give --samples more per task with memrl data ruler)")
        _ruler(cfg, data, a.docs, a.tasks, a.out, a.max_samples, a.restart, console)
    else:
        _qa(cfg, data, a.docs, a.out, a.max_samples, a.restart, console, a.rollouts)


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
