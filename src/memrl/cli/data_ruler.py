"""``memrl data ruler``: the RULER synthetic suite (MemAgent's out-of-distribution table)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from memrl.cli.errors import user_errors
from memrl.io.atomic import atomic_write
from memrl.data.outdir import check_writable_dir, record_outputs

REPORT = "ruler_report.json"


def _check_file(path: Optional[Path], flag: str) -> None:
    if path is not None and not path.is_file():
        raise FileNotFoundError(2, "is not a file" if path.exists() else "No such file or directory", f"{flag} {path}")


def _task_names(tasks: Optional[str], squad: Optional[Path], hotpotqa: Optional[Path],
                console: Console) -> list[str]:
    """The tasks to write (default: MemAgent's table, qa_1 only with SQuAD); refused when a QA task lacks its file."""
    from memrl.data.ruler import MEMAGENT_TASKS, parse_tasks

    if tasks is None:
        names = [t for t in MEMAGENT_TASKS if t != "qa_1" or squad is not None]
        if squad is None:
            console.print("qa_1 (SQuAD) skipped: pass --squad FILE to include it")
    else:
        names = parse_tasks(tasks)
    if "qa_1" in names and squad is None:
        raise ValueError("task qa_1 needs --squad FILE (SQuAD's official JSON); memrl does not ship SQuAD")
    if "qa_2" in names and hotpotqa is None:
        raise ValueError("task qa_2 needs --hotpotqa FILE (HotpotQA-schema questions)")
    return names


def _write_files(out: Path, names: list[str], lengths: list[int], counter: Any, samples: int, seed: int,
                 sources: Any, console: Console) -> list[Any]:
    """One file per (task, length), with a progress bar each; their reports."""
    from memrl.data.ruler import write_task_file

    reports = []
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=console) as progress:
        for name in names:
            for length in lengths:
                bar = progress.add_task(f"{name} {length}", total=samples)
                reports.append(write_task_file(out, name, length, counter, samples=samples, seed=seed,
                                               sources=sources, progress=lambda k, b=bar: progress.advance(b, k)))
                progress.remove_task(bar)
    return reports


def _report_table(reports: list[Any], tokenizer_name: str) -> Table:
    table = Table(title=f"RULER files ({tokenizer_name})")
    for col in ("file", "samples", "target", "tokens min", "tokens mean", "tokens max"):
        table.add_column(col, justify="left" if col == "file" else "right")
    for r in reports:
        table.add_row(Path(r.path).name, str(r.samples), f"{r.length:,}", f"{r.tokens_min:,}",
                      f"{r.tokens_mean:,.0f}", f"{r.tokens_max:,}")
    return table


def ruler(
    out: Path = typer.Option(..., "--out", "-o", help="Output folder (created if missing)."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", "-t", help="Tokenizer whose tokens fill each "
                                            "length: a model folder, hub id, alias (tiny) or tokenizer.json. "
                                            "Without it lengths are approximate (words + punctuation)."),
    lengths: str = typer.Option("8k,16k,32k,64k,128k,256k,512k", "--lengths", "-l",
                                help="Target lengths in tokens (k = 1024), comma-separated."),
    tasks: Optional[str] = typer.Option(None, "--tasks", help="Comma-separated tasks: niah_single_1-3, "
                                        "niah_multikey_1-3, niah_multivalue, niah_multiquery, vt, cwe, fwe, qa_1 "
                                        "(SQuAD), qa_2 (HotpotQA); 'memagent' = MemAgent's table, 'all' = every "
                                        "task. Default: MemAgent's table (qa_1 only with --squad)."),
    samples: int = typer.Option(128, "--samples", "-n", help="Samples per task and length (QA: at most the "
                                "number of questions in the file)."),
    seed: int = typer.Option(42, help="Seed; sample i depends only on (seed, task, length, i)."),
    squad: Optional[Path] = typer.Option(None, "--squad", help="SQuAD's official JSON (v1.1 or v2.0), needed "
                                         "for qa_1; memrl does not ship SQuAD."),
    hotpotqa: Optional[Path] = typer.Option(None, "--hotpotqa", help="HotpotQA-schema questions for qa_2."),
    pool: list[Path] = typer.Option([], "--pool", help="Extra QA documents (JSONL of {title, text}, or "
                                    "HotpotQA-schema); repeatable. Needed for long QA targets."),
    essay: Optional[Path] = typer.Option(None, "--essay", help="Prose for the essay haystack (text file, or "
                                         "JSON/JSONL with a text field), e.g. Paul Graham's essays as in RULER. "
                                         "Default: generated essay-like sentences."),
) -> None:
    """Write RULER-style samples as DIR/ruler_{task}_{length}.jsonl (memrl's eval layout) + ruler_report.json.

    Each sample's context, question and the task's answer room fit the target length in the given tokenizer's tokens.
    """
    from memrl.data.ruler import file_name, parse_lengths
    from memrl.data.ruler_base import RulerSources
    from memrl.data.ruler_text import EssaySource, load_essay_sentences
    from memrl.data.tokens import load_token_counter

    if samples < 1:
        raise ValueError(f"--samples must be >= 1, got {samples}")
    target_lengths = parse_lengths(lengths)
    console = Console(stderr=True)
    names = _task_names(tasks, squad, hotpotqa, console)
    _check_file(squad, "--squad")
    _check_file(hotpotqa, "--hotpotqa")
    _check_file(essay, "--essay")
    for p in pool:
        _check_file(p, "--pool")
    check_writable_dir(out)
    sources = RulerSources(
        essay=EssaySource(load_essay_sentences(essay) if essay else None),
        squad=None if squad is None else str(squad), hotpotqa=None if hotpotqa is None else str(hotpotqa),
        pool=[str(p) for p in pool])
    with console.status(f"loading tokenizer {tokenizer or '(approximate counts)'}"):
        counter = load_token_counter(tokenizer)
    record_outputs(out, [file_name(t, n) for t in names for n in target_lengths] + [REPORT])
    reports = _write_files(out, names, target_lengths, counter, samples, seed, sources, console)
    with atomic_write(out / REPORT) as fh:
        json.dump([r.to_dict() for r in reports], fh, indent=2)
        fh.write("\n")
    Console(width=None if sys.stdout.isatty() else 120).print(_report_table(reports, counter.name))
    console.print(f"wrote {len(reports)} files and {REPORT} to {out}")


def register(app: typer.Typer) -> None:
    """Add ``ruler`` to the ``memrl data`` command group."""
    app.command("ruler")(user_errors(ruler))
