"""``memrl data filter``: drop questions a model answers without reading the document.

MemAgent filters its HotpotQA training set this way: a question the base model already
answers from memory teaches nothing about reading, and its reward is earned whatever the
memory agent does with the document. Each question is asked alone (no context) with a
short closed-book prompt; a question is dropped when any of ``--tries`` answers scores 1
on ``--metric`` against its gold answers. The kept samples are written unchanged in the
input's layout (eval ``input/answers`` or verl ``prompt/reward_model``), and a report
of what was dropped goes next to the output.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from memrl.cli.errors import user_errors

CLOSED_BOOK_PROMPT = (
    "Answer the question from what you know.\n\n"
    "Question:\n{question}\n\n"
    "Reply with a short answer inside \\boxed{}, for example \\boxed{Paris}."
)
METRICS = ("em", "sub_em", "f1")


@dataclass
class FilterReport:
    """What ``memrl data filter`` kept and dropped (written as ``OUT.filter.json``)."""

    input: str
    output: str
    model: str
    metric: str
    tries: int
    total: int = 0
    kept: int = 0
    dropped: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        share = round(100 * len(self.dropped) / self.total, 2) if self.total else 0.0
        return {"input": self.input, "output": self.output, "model": self.model, "metric": self.metric,
                "tries": self.tries, "total": self.total, "kept": self.kept, "dropped": len(self.dropped),
                "dropped_percent": share, "dropped_questions": self.dropped}


async def answered_without_context(samples: Sequence[Any], engine: Any, tokenizer: Any, *, metric: str = "sub_em",
                                   tries: int = 1, temperature: float = 0.0, max_new_tokens: int = 256,
                                   concurrency: int = 64) -> list[str | None]:
    """Per sample: the closed-book answer that scored 1 on ``metric`` (``None`` when no try did)."""
    from memrl.engines.base import SamplingParams
    from memrl.rewards.qa import extract_boxed, score_answer
    from memrl.workflows.common import decode, encode_text, stop_token_ids, strip_stop
    from memrl.workflows.templates import TokenTemplate

    template = TokenTemplate(CLOSED_BOOK_PROMPT, tokenizer)
    stops = stop_token_ids(tokenizer)
    params = SamplingParams(max_new_tokens=max_new_tokens, stop_token_ids=stops, temperature=temperature,
                            greedy=temperature == 0)
    sem = asyncio.Semaphore(concurrency)

    async def one(sample: Any) -> str | None:
        prompt = template.render(question=encode_text(tokenizer, sample.question))
        for _ in range(tries):
            async with sem:
                res = await engine.generate(prompt, params)
            answer = extract_boxed(decode(tokenizer, strip_stop(res.token_ids, stops)))
            if getattr(score_answer(answer, sample.answers), metric) >= 1.0:
                return answer
        return None

    return list(await asyncio.gather(*(one(s) for s in samples)))


def _schema(path: Path) -> str:
    """``train`` for verl-layout records (``prompt``), else ``eval``; judged on the first record."""
    from memrl.data.records import iter_records

    for _, rec in iter_records(path):
        return "train" if "prompt" in rec and "input" not in rec else "eval"
    return "eval"


def register(app: typer.Typer) -> None:
    """Add ``filter`` to the ``memrl data`` command group."""
    app.command("filter")(filter_cmd)


def _check_options(input: Path, out: Path, metric: str, tries: int, max_new_tokens: int, concurrency: int) -> None:
    if metric not in METRICS:
        raise ValueError(f"--metric must be one of {', '.join(METRICS)}, got {metric!r}")
    if tries < 1 or max_new_tokens < 1 or concurrency < 1:
        raise ValueError("--tries, --max-new-tokens and --concurrency must be >= 1")
    if not input.is_file():
        raise ValueError(f"--input: no such file: {input}")
    if out.resolve() == input.resolve():
        raise ValueError("--out must differ from --input (the input is read while the output is written)")
    if out.suffix not in (".json", ".jsonl", ".parquet"):
        raise ValueError(f"--out must end in .json, .jsonl or .parquet, got {out.name}")


def _write_kept(samples: Sequence[Any], hits: Sequence[str | None], report: FilterReport, out: Path,
                schema: str) -> Path:
    """Write the samples no try answered to ``out`` and the report beside it (its path)."""
    from memrl.data import SampleWriter
    from memrl.io.atomic import atomic_write
    from memrl.data.stream import LazySample

    kept = []
    for sample, hit in zip(samples, hits):
        if hit is None:
            kept.append(sample)
        else:
            report.dropped.append({"index": sample.index, "question": sample.question,
                                   "answers": list(sample.answers), "closed_book_answer": hit})
    report.kept = len(kept)
    out.parent.mkdir(parents=True, exist_ok=True)
    with SampleWriter(out, schema, out.suffix[1:]) as writer:  # type: ignore[arg-type]
        for sample in kept:  # each context copied from the input piece by piece
            writer.write(sample, sample.context_pieces() if isinstance(sample, LazySample) else None)
    report_path = out.with_name(out.name + ".filter.json")
    with atomic_write(report_path) as fh:
        json.dump(report.to_dict(), fh, indent=2)
        fh.write("\n")
    return report_path


@user_errors
def filter_cmd(
    input: Path = typer.Option(..., "--input", "-i", help="Long-context QA file (eval or verl training layout)."),
    model: str = typer.Option(..., "--model", "-m", help="Model that answers without the document: folder, hub "
                              "id or alias (with --engine openai: the tokenizer source)."),
    out: Path = typer.Option(..., "--out", "-o", help="Filtered file (.json, .jsonl or .parquet); the report goes "
                             "to OUT.filter.json."),
    metric: str = typer.Option("sub_em", "--metric", help="What counts as answered: em | sub_em | f1 (=1)."),
    tries: int = typer.Option(1, "--tries", help="Answers per question; dropped if any is right."),
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy (use > 0 with --tries > 1)."),
    max_new_tokens: int = typer.Option(256, "--max-new-tokens", help="Answer budget."),
    engine: Optional[str] = typer.Option(None, "--engine", "-e", help="hf (default) | openai | vllm."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="openai engine: server URL ending in /v1."),
    concurrency: int = typer.Option(64, "--concurrency", help="Questions in flight at once."),
) -> None:
    """Drop questions the model answers correctly without the document (MemAgent's training-data filter)."""
    from memrl.cli.common import resolve_config
    from memrl.data.stream import read_samples_lazily
    from memrl.engines.factory import build_engine
    from memrl.models.resolve import load_tokenizer

    _check_options(input, out, metric, tries, max_new_tokens, concurrency)
    console = Console(stderr=True)
    samples = list(read_samples_lazily(input))  # questions and answers only: contexts stay on disk
    schema = _schema(input)
    cfg = resolve_config(None, None, {"model.path": model, "engine.kind": engine, "engine.base_url": base_url,
                                      "engine.concurrency": concurrency})
    tokenizer = load_tokenizer(cfg.model.tokenizer or cfg.model.path)
    eng = build_engine(cfg)
    console.print(f"asking {model} {len(samples)} questions without their documents ({tries} tr"
                  f"{'y' if tries == 1 else 'ies'}, {metric})", highlight=False)

    async def main() -> list[str | None]:
        try:
            return await answered_without_context(samples, eng, tokenizer, metric=metric, tries=tries,
                                                  temperature=temperature, max_new_tokens=max_new_tokens,
                                                  concurrency=concurrency)
        finally:
            await eng.close()

    try:
        hits = asyncio.run(main())
    except KeyboardInterrupt:
        console.print("interrupted: nothing written", highlight=False, markup=False)
        raise typer.Exit(130) from None
    report = FilterReport(str(input), str(out), model, metric, tries, total=len(samples))
    report_path = _write_kept(samples, hits, report, out, schema)
    d = report.to_dict()
    typer.echo(f"kept {d['kept']} of {d['total']} questions; dropped {d['dropped']} ({d['dropped_percent']}%) "
               f"that {model} answered without the document")
    console.print(f"wrote {out} and {report_path}", highlight=False)
