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

from memrl.cli.common import counted
from memrl.cli.data_ruler_resume import PROGRESS, RulerProgress, RunSettings
from memrl.cli.errors import user_errors
from memrl.io.atomic import atomic_write
from memrl.data.outdir import check_writable_dir, record_outputs
from memrl.io.console import log_console

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


def _say_unused(names: list[str], tasks: Optional[str], squad: Optional[Path], hotpotqa: Optional[Path],
                pool: list[Path], console: Console) -> None:
    """One line for each QA file given that no task written reads (it looked as if it added its task)."""
    asked = tasks or "memagent"
    for task, given, flag in (("qa_1", squad, "--squad"), ("qa_2", hotpotqa, "--hotpotqa")):
        if given is not None and task not in names:
            console.print(f"{flag} not used: {task} is not among the tasks written (add it: --tasks {asked},{task})",
                          highlight=False)
    if pool and not any(n.startswith("qa_") for n in names):
        console.print("--pool not used: it adds documents to the QA tasks (qa_1, qa_2), none of which is written",
                      highlight=False)


def _write_files(out: Path, names: list[str], lengths: list[int], counter: Any, samples: int, seed: int,
                 sources: Any, console: Console, kept: RulerProgress) -> list[Any]:
    """One file per (task, length), with a progress bar each; their reports. A file an earlier run wrote under
    the same settings is kept (``kept``)."""
    from memrl.data.ruler import write_task_file

    def write(name: str, length: int, advance: Any) -> Any:
        return write_task_file(out, name, length, counter, samples=samples, seed=seed, sources=sources,
                               progress=advance)

    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn())
    return _each_file(names, lengths, samples, console, kept, columns, write, "memrl")


def _each_file(names: list[str], lengths: list[int], samples: int, console: Console, kept: RulerProgress,
               columns: tuple[Any, ...], write: Any, protocol: str) -> list[Any]:
    """Run ``write(task, length, advance)`` for each (task, length) whose files (:func:`_file_names`) an earlier
    run did not leave under these settings, with a progress bar each; every file's report, kept or new."""
    from memrl.data.ruler import RulerFileReport

    reports = []
    with Progress(*columns, console=console) as progress:
        for name in names:
            for length in lengths:
                files = _file_names(protocol, name, length)
                done = kept.done(name, length, files)
                if done is not None:
                    reports.append(RulerFileReport(**done))
                    console.print(f"kept {files[0]} (an earlier run wrote it with these settings)")
                    continue
                bar = progress.add_task(f"{name} {length}", total=samples)
                report = write(name, length, lambda k, b=bar: progress.advance(b, k))
                kept.record(name, length, files, report.to_dict())
                reports.append(report)
                progress.remove_task(bar)
    return reports


def _paper_tasks(protocol: str, tasks: Optional[str], squad: Optional[Path], hotpotqa: Optional[Path],
                 console: Console) -> list[str]:
    """The tasks under a paper's protocol: default its run script's table, QA tasks skipped without their file."""
    from memrl.data.ruler import parse_tasks
    from memrl.data.ruler_paper import PAPER_TABLES

    if tasks is None:
        names = list(PAPER_TABLES[protocol])
        for name, given, flag in (("qa_1", squad, "--squad"), ("qa_2", hotpotqa, "--hotpotqa")):
            if name in names and given is None:
                names.remove(name)
                console.print(f"{name} skipped: pass {flag} FILE to include it")
        return names
    names = parse_tasks(tasks)
    if "qa_1" in names and squad is None:
        raise ValueError("task qa_1 needs --squad FILE (SQuAD v2.0 JSON, as RULER's json/squad.json)")
    if "qa_2" in names and hotpotqa is None:
        raise ValueError("task qa_2 needs --hotpotqa FILE (HotpotQA JSON, as RULER's json/hotpotqa.json)")
    return names


def _paper_text(protocol: str, repo: Optional[Path], names: list[str], essay: Optional[Path],
                console: Console) -> Any:
    """The original's text (one-line error without a checkout), checked against the tasks asked for."""
    from memrl.data.ruler_paper_text import ESSAY_HINT, load_paper_text, sentence_splitter

    text = load_paper_text(protocol, repo)
    unknown = [n for n in names if n not in text.configs]
    if unknown:
        raise ValueError(f"--tasks: {', '.join(unknown)} not in {text.flavour.original.name}'s synthetic.yaml")
    needs_essay = [n for n in names if (text.configs[n].get("args") or {}).get("type_haystack") == "essay"]
    if needs_essay and essay is None:
        raise ValueError(f"--essay: {', '.join(needs_essay)} need Paul Graham's essays; pass {ESSAY_HINT}")
    if needs_essay:
        console.print(f"essay sentences: {sentence_splitter()[1]}")
    return text


def _write_paper(out: Path, text: Any, names: list[str], lengths: list[int], counter: Any, samples: int,
                 seed: int, chunks: int, inputs: Any, console: Console, kept: RulerProgress) -> list[Any]:
    """``--protocol ruler|memagent``: the original's generator per (task, length); their reports."""
    from memrl.data.ruler_paper import write_paper_task_file

    def write(name: str, length: int, advance: Any) -> Any:
        return write_paper_task_file(out, name, length, counter, text=text, samples=samples, seed=seed,
                                     inputs=inputs, chunks=chunks, progress=advance)

    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return _each_file(names, lengths, samples, console, kept, columns, write, text.flavour.name)


def _report_table(reports: list[Any], tokenizer_name: str) -> Table:
    table = Table(title=f"RULER files ({tokenizer_name})")
    for col in ("file", "samples", "target", "tokens min", "tokens mean", "tokens max"):
        table.add_column(col, justify="left" if col == "file" else "right")
    for r in reports:
        table.add_row(Path(r.path).name, str(r.samples), f"{r.length:,}", f"{r.tokens_min:,}",
                      f"{r.tokens_mean:,.0f}", f"{r.tokens_max:,}")
    return table


_HELP = {
    "tokenizer": "Tokenizer whose tokens fill each length: a model folder, hub id, alias (tiny) or tokenizer.json. "
                 "Without it lengths are approximate (words + punctuation).",
    "tasks": "Comma-separated tasks: niah_single_1-3, niah_multikey_1-3, niah_multivalue, niah_multiquery, vt, cwe, "
             "fwe, qa_1 (SQuAD), qa_2 (HotpotQA); 'memagent' = MemAgent's table, 'all' = every task. Default: "
             "MemAgent's table (qa_1 only with --squad); under --protocol ruler RULER's 13 tasks (QA only with its "
             "file).",
    "samples": "Samples per task and length (QA: at most the number of questions in the file). Default: 128 "
               "(memrl, memagent), 500 (ruler), as the run scripts.",
    "seed": "Seed. memrl: sample i depends only on (seed, task, length, i); ruler|memagent: the scripts' "
            "--random_seed.",
    "squad": "SQuAD's official JSON (v2.0; v1.1 under memrl), needed for qa_1; memrl does not ship SQuAD.",
    "hotpotqa": "HotpotQA-schema questions for qa_2.",
    "pool": "Extra QA documents (JSONL of {title, text}, or HotpotQA-schema); repeatable. Needed for long QA "
            "targets (memrl protocol only).",
    "essay": "Prose for the essay haystack (text file, or JSON/JSONL with a text field), e.g. Paul Graham's essays "
             "as in RULER. Default: generated essay-like sentences. Under --protocol ruler|memagent: RULER's "
             "PaulGrahamEssays.json (made by its scripts/data/synthetic/json/download_paulgraham_essay.py).",
    "protocol": "Whose generator: memrl (memrl's own wording and sizing), ruler (NVIDIA RULER at c3f5e3b: the "
                "samples its scripts write for the seed), memagent (MemAgent's RULER copy at 76b7a65).",
    "ruler_repo": "--protocol ruler: a checkout of github.com/NVIDIA/RULER, whose templates memrl reads "
                  "(default: $MEMRL_RULER_REPO).",
    "memagent_repo": "--protocol memagent: a checkout of github.com/BytedTsinghua-SIA/MemAgent (default: "
                     "$MEMRL_MEMAGENT_REPO).",
    "english_words": "--protocol ruler, cwe beyond wonderwords' 8.5K words: RULER's json/english_words.json "
                     "(a Git LFS file).",
    "chunks": "--protocol ruler|memagent: the samples split over N processes' draws (seed+i each), as the "
              "prepare scripts' --chunk_amount (their default, 1; MemAgent's ruler_data_prepare.sh passes 8).",
}


def ruler(
    out: Path = typer.Option(..., "--out", "-o", help="Output folder (created if missing)."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", "-t", help=_HELP["tokenizer"]),
    lengths: str = typer.Option("8k,16k,32k,64k,128k,256k,512k", "--lengths", "-l",
                                help="Target lengths in tokens (k = 1024), comma-separated."),
    tasks: Optional[str] = typer.Option(None, "--tasks", help=_HELP["tasks"]),
    samples: Optional[int] = typer.Option(None, "--samples", "-n", help=_HELP["samples"]),
    seed: int = typer.Option(42, help=_HELP["seed"]),
    squad: Optional[Path] = typer.Option(None, "--squad", help=_HELP["squad"]),
    hotpotqa: Optional[Path] = typer.Option(None, "--hotpotqa", help=_HELP["hotpotqa"]),
    pool: list[Path] = typer.Option([], "--pool", help=_HELP["pool"]),
    essay: Optional[Path] = typer.Option(None, "--essay", help=_HELP["essay"]),
    protocol: str = typer.Option("memrl", "--protocol", help=_HELP["protocol"]),
    ruler_repo: Optional[Path] = typer.Option(None, "--ruler-repo", help=_HELP["ruler_repo"]),
    memagent_repo: Optional[Path] = typer.Option(None, "--memagent-repo", help=_HELP["memagent_repo"]),
    english_words: Optional[Path] = typer.Option(None, "--english-words", help=_HELP["english_words"]),
    chunks: int = typer.Option(1, "--chunks", help=_HELP["chunks"]),
) -> None:
    """Write RULER samples as DIR/ruler_{task}_{length}.jsonl (memrl's eval layout) + ruler_report.json.

    --protocol memrl (default): memrl's own generator; each sample's context, question and answer room fit the
    target length. --protocol ruler|memagent: the original's generator, record for record.
    """
    from memrl.data.ruler import parse_lengths

    samples = _check_options(protocol, samples, chunks, pool)
    target_lengths = parse_lengths(lengths)
    console = log_console()
    paper = protocol != "memrl"
    names = _paper_tasks(protocol, tasks, squad, hotpotqa, console) if paper else \
        _task_names(tasks, squad, hotpotqa, console)
    _say_unused(names, tasks, squad, hotpotqa, pool, console)
    for path, flag in ((squad, "--squad"), (hotpotqa, "--hotpotqa"), (essay, "--essay"),
                       (english_words, "--english-words"), *((p, "--pool") for p in pool)):
        _check_file(path, flag)
    check_writable_dir(out)
    text = _paper_text(protocol, ruler_repo if protocol == "ruler" else memagent_repo, names, essay, console) \
        if paper else None
    counter = _counter(out, tokenizer, names, target_lengths, console, protocol)
    kept = RulerProgress(out, RunSettings.of(
        protocol, tokenizer, counter, samples, seed, chunks,
        {"--essay": essay, "--squad": squad, "--hotpotqa": hotpotqa, "--english-words": english_words}, pool, text))
    if text is not None:
        from memrl.data.ruler_paper_run import PaperInputs

        inputs = PaperInputs(*(None if p is None else str(p) for p in (essay, english_words, squad, hotpotqa)))
        reports = _write_paper(out, text, names, target_lengths, counter, samples, seed, chunks, inputs, console,
                               kept)
    else:
        from memrl.data.ruler_base import RulerSources
        from memrl.data.ruler_text import EssaySource, load_essay_sentences

        sources = RulerSources(
            essay=EssaySource(load_essay_sentences(essay) if essay else None),
            squad=None if squad is None else str(squad), hotpotqa=None if hotpotqa is None else str(hotpotqa),
            pool=[str(p) for p in pool])
        reports = _write_files(out, names, target_lengths, counter, samples, seed, sources, console, kept)
    _finish(out, reports, counter, console)


def _check_options(protocol: str, samples: Optional[int], chunks: int, pool: list[Path]) -> int:
    """The protocol, and the sample count (default: the protocol's run script's); one-line errors."""
    if protocol not in ("memrl", "ruler", "memagent"):
        raise ValueError(f"--protocol must be memrl, ruler or memagent, got {protocol!r}")
    samples = samples if samples is not None else (500 if protocol == "ruler" else 128)
    if samples < 1:
        raise ValueError(f"--samples must be >= 1, got {samples}")
    if chunks < 1 or chunks > samples:
        raise ValueError(f"--chunks must be between 1 and --samples ({samples}), got {chunks}")
    if protocol != "memrl" and pool:
        raise ValueError(f"--pool does not apply under --protocol {protocol} (the original's pool is the QA file)")
    return samples


def _file_names(protocol: str, task: str, length: int) -> list[str]:
    """The files one (task, length) is written to: memrl's layout, and under MemAgent's protocol its own too."""
    from memrl.data.ruler import file_name
    from memrl.data.ruler_paper import memagent_file_name

    return [file_name(task, length), *([memagent_file_name(task, length)] if protocol == "memagent" else [])]


def _counter(out: Path, tokenizer: Optional[str], names: list[str], lengths: list[int], console: Console,
             protocol: str) -> Any:
    """The token counter, loaded once the output folder has been claimed for the files to come (under
    MemAgent's protocol its own eval_{task}_{L}.json too)."""
    from memrl.data.tokens import load_token_counter

    with console.status(f"loading tokenizer {tokenizer or '(approximate counts)'}"):
        counter = load_token_counter(tokenizer)
    files = [f for t in names for n in lengths for f in _file_names(protocol, t, n)]
    record_outputs(out, [*files, REPORT, PROGRESS], by="memrl data ruler")
    return counter


def _finish(out: Path, reports: list[Any], counter: Any, console: Console) -> None:
    """The report file and table."""
    with atomic_write(out / REPORT) as fh:
        json.dump([r.to_dict() for r in reports], fh, indent=2)
        fh.write("\n")
    Console(width=None if sys.stdout.isatty() else 120).print(_report_table(reports, counter.name))
    console.print(f"wrote {counted(len(reports), 'file')} and {REPORT} to {out}")


def register(app: typer.Typer) -> None:
    """Add ``ruler`` to the ``memrl data`` command group."""
    app.command("ruler")(user_errors(ruler))
