"""``memrl data ...``: build long-context QA files."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from memrl.cli.errors import user_errors
from memrl.cli.progress import busy, progress
from memrl.io.atomic import atomic_write
from memrl.data.distance import ORDERS
from memrl.data.outdir import check_writable_dir, record_outputs
from memrl.data.synth import FileReport, parse_token_budget, plan_synthesis

app = typer.Typer(help="Prepare data: synthesize long-context QA files from HotpotQA-style questions.",
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
    with atomic_write(path) as fh:
        json.dump([r.to_dict() for r in reports], fh, indent=2)
        fh.write("\n")


@app.command("synth")
@user_errors
def synth(
    input: Path = typer.Option(..., "--input", "-i", help="HotpotQA or 2WikiMultihopQA questions (official JSON or "
                               "JSONL, or the column layout of the Hugging Face / FlashRAG copies)."),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder (created if missing)."),
    docs: str = typer.Option("", "--docs", "-d", help="Comma-separated document counts, one eval file each "
                             "(RULER-HQA uses 50,100,200,400,800,1600,3200,6400)."),
    train_tokens: Optional[str] = typer.Option(None, "--train-tokens", help="Also write a training file whose "
                                               "contexts fill this token budget (e.g. 32k, as MemAgent's 32K set)."),
    pool: list[Path] = typer.Option([], "--pool", help="Extra distractor paragraphs (JSONL of {title, text}, or "
                                    "HotpotQA-schema). Repeatable. Needed for large --docs."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", "-t", help="Tokenizer for exact token counts: "
                                            "a model folder, hub id or tokenizer.json. Without it counts are "
                                            "approximate."),
    seed: int = typer.Option(42, help="Seed; each sample's documents depend only on (seed, N, question)."),
    allow_repeats: bool = typer.Option(False, "--allow-repeats", help="Allow a paragraph to appear more than "
                                       "once when N exceeds the distinct paragraphs available."),
    question_distractors: bool = typer.Option(True, "--question-distractors/--no-question-distractors",
                                              help="Include each question's own (HotpotQA distractor-setting) "
                                              "non-gold paragraphs before random ones."),
    fmt: str = typer.Option("json", "--format", help="Eval file format: json (MemAgent's eval_N.json), jsonl "
                            "or parquet. The training file is always verl-style parquet."),
    max_samples: Optional[int] = typer.Option(None, "--max-samples", help="Use only the first K questions "
                                              "(all paragraphs still feed the distractor pool)."),
    dataset: str = typer.Option("hotpotqa", "--dataset", help="hotpotqa or 2wiki (2WikiMultihopQA): the name "
                                "used by --rememr1-names."),
    min_distance: Optional[int] = typer.Option(None, "--min-distance", help="ReMemR1's distance variant: evidence "
                                               "documents at least D positions apart (in reverse supporting-fact "
                                               "order unless --evidence-order says otherwise)."),
    evidence_order: Optional[str] = typer.Option(None, "--evidence-order", help="Order of the evidence documents: "
                                                 "reverse (ReMemR1's variants; default with --min-distance), "
                                                 "forward or any (default without)."),
    rememr1_names: bool = typer.Option(False, "--rememr1-names", help="Name eval files as ReMemR1 does: "
                                       "eval_{dataset}_{N}.json, eval_{dataset}_{N}_min_distance_{D}.json."),
) -> None:
    """Synthesize long-context QA: gold + distractor paragraphs as N numbered documents per question.

    Writes DIR/eval_{N}.json for each N (MemAgent/RULER-HQA eval layout; ReMemR1's names with
    --rememr1-names), optionally
    DIR/train_{K}k.parquet (verl RL layout), and DIR/token_report.json.
    """
    _check_synth_options(fmt, evidence_order, max_samples)
    budget = parse_token_budget(train_tokens) if train_tokens else None
    check_writable_dir(out)  # before reading a large input, not after
    console = Console(stderr=True)
    with busy(console, f"reading {input}"):
        plan = plan_synthesis(
            input, out, parse_docs(docs), train_tokens=budget, pool_files=pool, tokenizer=tokenizer,
            seed=seed, allow_repeats=allow_repeats, include_question_distractors=question_distractors,
            fmt=fmt, max_samples=max_samples, dataset=dataset, min_distance=min_distance,  # type: ignore[arg-type]
            evidence_order=evidence_order, rememr1_names=rememr1_names,  # type: ignore[arg-type]
        )
    console.print(f"{len(plan.synth.questions)} questions, paragraph pool of {len(plan.synth.pool):,}")
    record_outputs(plan.out, plan.output_names() + ["token_report.json"])
    with progress(console, "synth", total=plan.total_samples, noun="samples") as bar:
        reports = plan.run(bar.advance)
    _write_token_report(plan.out / "token_report.json", reports)
    Console(width=None if sys.stdout.isatty() else 120).print(report_table(reports))
    console.print(f"wrote {len(reports)} files and token_report.json to {plan.out}")
__import__("memrl.cli.data_ruler", fromlist=["register"]).register(app)  # memrl data ruler
__import__("memrl.cli.data_filter", fromlist=["register"]).register(app)  # memrl data filter
