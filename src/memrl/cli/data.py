"""``memrl data ...``: build long-context QA files."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from memrl.cli.common import counted
from memrl.cli.errors import user_errors
from memrl.cli.progress import busy, progress
from memrl.io.atomic import atomic_write
from memrl.data.distance import ORDERS
from memrl.data.outdir import check_writable_dir, record_outputs, recorded_owners
from memrl.data.synth import FileReport, parse_token_budget, plan_synthesis
from memrl.io.console import log_console

app = typer.Typer(help="Prepare data: long-context QA from HotpotQA-style questions, RULER samples, "
                       "MemAgent's no-context filter, the papers' client prompts.",
                  no_args_is_help=True)


def parse_docs(text: str) -> list[int]:
    """``50,100,200`` -> [50, 100, 200]; the flag is named in any error."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            n = int(part)
        except ValueError:
            raise ValueError(f"--docs: {part!r} is not an integer (expected e.g. --docs 50,100,200)") from None
        if n <= 0:
            raise ValueError(f"--docs: document counts must be positive, got {n}")
        out.append(n)
    return out


def report_table(reports: list[FileReport]) -> Table:
    table = Table(title=f"Token report ({reports[0].tokenizer})" if reports else "Token report")
    for col in ("file", "samples", "docs", "tokens min", "tokens mean", "tokens max", "tokens total"):
        table.add_column(col, justify="left" if col == "file" else "right")
    for r in reports:
        docs = str(r.docs) if r.docs is not None else f"{r.docs_min}-{r.docs_max}"
        table.add_row(Path(r.path).name, str(r.num_samples), docs, f"{r.tokens_min:,}",
                      f"{r.tokens_mean:,.0f}", f"{r.tokens_max:,}", f"{r.tokens_total:,}")
    return table


def _check_synth_options(fmt: str, evidence_order: Optional[str], max_samples: Optional[int]) -> None:
    if fmt not in ("json", "jsonl", "parquet"):
        raise ValueError(f"--format must be json, jsonl or parquet, got {fmt!r}")
    if evidence_order is not None and evidence_order not in ORDERS:
        raise ValueError(f"--evidence-order must be one of {', '.join(ORDERS)}, got {evidence_order!r}")
    if max_samples is not None and max_samples <= 0:
        raise ValueError(f"--max-samples must be positive, got {max_samples}")


def _write_token_report(path: Path, reports: list[FileReport]) -> None:
    """The folder's token report: this run's files, plus the entries an earlier run into the same folder wrote
    for other files (the README writes the training file and the eval files in two runs; the second dropped the
    first's entry)."""
    new = [r.to_dict() for r in reports]
    written = {Path(str(e.get("path"))).name for e in new}  # by file name: --out may be spelled another way
    try:
        earlier = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        earlier = []
    kept = [e for e in earlier if isinstance(e, dict) and Path(str(e.get("path"))).name not in written
            and (path.parent / Path(str(e.get("path"))).name).is_file()] if isinstance(earlier, list) else []
    with atomic_write(path) as fh:
        json.dump(kept + new, fh, indent=2)
        fh.write("\n")


MIN_DISTANCE_OPT = typer.Option(
    None, "--min-distance", help="ReMemR1's distance variant: evidence documents at least D positions apart (memrl: "
    "placed so, in reverse supporting-fact order unless --evidence-order says otherwise; --protocol rememr1: "
    "ReMemR1's filter of the drawn samples, instead of its variants 100,200,400,800,1600).")
EVIDENCE_ORDER_OPT = typer.Option(None, "--evidence-order", help="Order of the evidence documents: reverse "
                                  "(ReMemR1's variants; default with --min-distance), forward or any (default without).")
REMEMR1_NAMES_OPT = typer.Option(False, "--rememr1-names", help="Name eval files as ReMemR1 does: "
                                 "eval_{dataset}_{N}.json, eval_{dataset}_{N}_min_distance_{D}.json "
                                 "(always so under --protocol rememr1).")
PROTOCOL_OPT = typer.Option(
    "memrl", "--protocol", help="Whose generator: memrl (its own: per-sample shuffles, token-budget training "
    "file, placed distance variants), memagent (MemAgent's RULER-HQA eval files and 200-document training "
    "file) or rememr1 (ReMemR1's test files and distance variants). The papers' protocols reproduce their "
    "scripts byte for byte and read their document template from --memagent-repo / --rememr1-repo.")
MEMAGENT_REPO_OPT = typer.Option(None, "--memagent-repo", envvar="MEMRL_MEMAGENT_REPO", help="A checkout of "
                                 "github.com/BytedTsinghua-SIA/MemAgent (read, never imported) for --protocol memagent.")
INDICES_OPT = typer.Option(None, "--indices", help="--protocol memagent: the questions to use, in order: a JSON list "
                           "of input positions, or of records with 'index' (MemAgent's own eval_200.json, which "
                           "its eval script reads its questions from).")
FOLLOWS_OPT = typer.Option([], "--follows", help="--protocol rememr1: an input the same run of ReMemR1's script "
                           "processed before this one (its run script does hotpotqa, then 2wikimultihopqa, on one "
                           "RNG): its question picks are replayed first, so this file's picks are the script's. "
                           "Repeatable, in order.")
REMEMR1_REPO_OPT = typer.Option(None, "--rememr1-repo", envvar="MEMRL_REMEMR1_REPO", help="A checkout of "
                                "github.com/syr-cn/ReMemR1 (read, never imported) for --protocol rememr1.")


def _refuse_memrl_only(protocol: str, fmt: str, allow_repeats: bool, question_distractors: bool,
                       evidence_order: Optional[str]) -> None:
    """Options of memrl's own generator that a paper's script has no counterpart for, named in one line."""
    given = [flag for flag, on in (("--format", fmt != "json"), ("--allow-repeats", allow_repeats),
                                   ("--no-question-distractors", not question_distractors),
                                   ("--evidence-order", evidence_order is not None)) if on]
    if given:
        raise ValueError(f"{given[0]}: only --protocol memrl has this option ({protocol}'s script has no such "
                         "choice); leave it out")


def _refuse_paper_only(protocol: str, indices: Optional[Path], follows: list[Path]) -> None:
    """``--indices`` / ``--follows`` replay a paper's script: memrl's own generator has no such input."""
    if protocol == "memrl" and (indices is not None or follows):
        raise ValueError(f"{'--indices' if indices is not None else '--follows'}: replays a paper's script; "
                         "use it with --protocol memagent (--indices) or rememr1 (--follows)")


def _say_replaced(out: Path, names: list[str], console: Console) -> None:
    """One line when an earlier ``data synth`` into ``out`` is overwritten in part: which files this run
    replaces, and which of that run's files stay beside them (made with its settings, not these)."""
    owners = recorded_owners(out) or {}
    earlier = sorted(n for n, by in owners.items() if "memrl data synth" in by and (out / n).exists()
                     and n != "token_report.json")
    replaced = [n for n in earlier if n in names]
    if not replaced:
        return
    stay = [n for n in earlier if n not in names]
    console.print(f"replacing {', '.join(replaced)} in {out} (written by an earlier memrl data synth)"
                  + (f"; left beside them from that run, with its settings: {', '.join(stay)}" if stay else ""),
                  highlight=False, markup=False)


def _synth_paper(protocol: str, console: Console, opts: dict[str, Any]) -> list[FileReport]:
    """``--protocol memagent|rememr1``: plan (reads the checkout and input), print notices, write."""
    from memrl.data.paper_synth import plan_paper_synthesis

    with busy(console, f"reading {opts['input_path']}"):
        plan = plan_paper_synthesis(protocol, **opts)
    console.print(f"{len(plan.questions)} questions, paragraph pool of {len(plan.pool):,} ({protocol}'s generator)")
    for notice in plan.notices:
        console.print(notice, highlight=False, markup=False)
    _say_replaced(plan.out, plan.output_names(), console)
    record_outputs(plan.out, plan.output_names() + ["token_report.json"], by="memrl data synth")
    with progress(console, "synth", total=plan.total_samples, noun="samples") as bar:
        return plan.run(bar.advance)


def _synth_memrl(console: Console, opts: dict[str, Any]) -> list[FileReport]:
    """memrl's own generator (the default protocol)."""
    with busy(console, f"reading {opts['input_path']}"):
        plan = plan_synthesis(**opts)
    console.print(f"{len(plan.synth.questions)} questions, paragraph pool of {len(plan.synth.pool):,}")
    _say_replaced(plan.out, plan.output_names(), console)
    record_outputs(plan.out, plan.output_names() + ["token_report.json"], by="memrl data synth")
    with progress(console, "synth", total=plan.total_samples, noun="samples") as bar:
        return plan.run(bar.advance)


@app.command("synth")
@user_errors
def synth(
    input: Path = typer.Option(..., "--input", "-i", help="HotpotQA or 2WikiMultihopQA questions (official JSON or "
                               "JSONL, or the column layout of the Hugging Face / FlashRAG copies)."),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder (created if missing)."),
    docs: str = typer.Option("", "--docs", "-d", help="Comma-separated document counts, one eval file each "
                             "(RULER-HQA uses 50,100,200,400,800,1600,3200,6400)."),
    train_tokens: Optional[str] = typer.Option(None, "--train-tokens", help="Also write a training file whose "
                                               "contexts fill this token budget (e.g. 32k, as MemAgent's 32K set; "
                                               "--protocol memagent: its 200-document file instead)."),
    pool: list[Path] = typer.Option([], "--pool", help="Extra distractor paragraphs (JSONL of {title, text}, or "
                                    "HotpotQA-schema). Repeatable. Needed for large --docs."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", "-t", help="Tokenizer for exact token counts: "
                                            "a model folder, hub id or tokenizer.json. Without it counts are "
                                            "approximate."),
    seed: int = typer.Option(42, help="Seed; memrl: each sample's documents depend only on (seed, N, question); "
                             "papers: their scripts' random.seed."),
    allow_repeats: bool = typer.Option(False, "--allow-repeats", help="Allow a paragraph to appear more than "
                                       "once when N exceeds the distinct paragraphs available."),
    question_distractors: bool = typer.Option(True, "--question-distractors/--no-question-distractors",
                                              help="Include each question's own (HotpotQA distractor-setting) "
                                              "non-gold paragraphs before random ones."),
    fmt: str = typer.Option("json", "--format", help="Eval file format: json (MemAgent's eval_N.json), jsonl "
                            "or parquet. The training file is always verl-style parquet."),
    max_samples: Optional[int] = typer.Option(None, "--max-samples", help="Use only the first K questions "
                                              "(all paragraphs still feed the distractor pool); --protocol "
                                              "rememr1: its n_subset (K of 5K questions drawn per N)."),
    dataset: str = typer.Option("hotpotqa", "--dataset", help="hotpotqa or 2wiki (2WikiMultihopQA): the name "
                                "used by --rememr1-names."),
    min_distance: Optional[int] = MIN_DISTANCE_OPT,
    evidence_order: Optional[str] = EVIDENCE_ORDER_OPT,
    rememr1_names: bool = REMEMR1_NAMES_OPT,
    protocol: str = PROTOCOL_OPT,
    memagent_repo: Optional[Path] = MEMAGENT_REPO_OPT,
    rememr1_repo: Optional[Path] = REMEMR1_REPO_OPT,
    indices: Optional[Path] = INDICES_OPT,
    follows: list[Path] = FOLLOWS_OPT,
) -> None:
    """Synthesize long-context QA: gold + distractor paragraphs as N numbered documents per question.

    Writes DIR/eval_{N}.json for each N (MemAgent/RULER-HQA eval layout; ReMemR1's names with
    --rememr1-names), optionally DIR/train_{K}k.parquet (verl RL layout), and DIR/token_report.json.
    """
    _check_synth_options(fmt, evidence_order, max_samples)
    budget = parse_token_budget(train_tokens) if train_tokens else None
    opts: dict[str, Any] = dict(input_path=input, out=out, docs=parse_docs(docs), train_tokens=budget, pool_files=pool,
                                tokenizer=tokenizer, seed=seed, max_samples=max_samples, dataset=dataset,
                                min_distance=min_distance, rememr1_names=rememr1_names)
    _refuse_paper_only(protocol, indices, follows)
    if protocol != "memrl":
        _refuse_memrl_only(protocol, fmt, allow_repeats, question_distractors, evidence_order)
        opts.update(memagent_repo=memagent_repo, rememr1_repo=rememr1_repo, indices=indices, follows=follows)
    check_writable_dir(out)  # before reading a large input, not after
    console = log_console()
    if protocol == "memrl":
        opts.update(allow_repeats=allow_repeats, include_question_distractors=question_distractors, fmt=fmt,
                    evidence_order=evidence_order)
        reports = _synth_memrl(console, opts)
    else:
        reports = _synth_paper(protocol, console, opts)
    _finish(out, reports, console)


def _finish(out: Path, reports: list[FileReport], console: Console) -> None:
    _write_token_report(out / "token_report.json", reports)
    Console(width=None if sys.stdout.isatty() else 120).print(report_table(reports))
    console.print(f"wrote {counted(len(reports), 'file')} and token_report.json to {out}")
__import__("memrl.cli.data_ruler", fromlist=["register"]).register(app)  # memrl data ruler
__import__("memrl.cli.data_filter", fromlist=["register"]).register(app)  # memrl data filter
__import__("memrl.cli.data_prompts", fromlist=["register"]).register(app)  # memrl data prompts
