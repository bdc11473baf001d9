"""``memrl data filter``: drop questions a model answers without reading the document.

MemAgent filters its HotpotQA training set this way: a question the base model already
answers from memory teaches nothing about reading, and its reward is earned whatever the
memory agent does with the document. Each question is asked alone (no context) with a
short closed-book prompt; a question is dropped when any of ``--tries`` answers scores 1
on ``--metric`` against its gold answers. The kept samples are written unchanged in the
input's layout (eval ``input/answers`` or verl ``prompt/reward_model``), and a report
of what was dropped goes next to the output.

``--protocol memagent`` is MemAgent's own filter (``taskutils/memory_data/filter.py`` and
``filter2.py``): a base model (``--model``) and an instruct model (``--instruct-model``) each answer
twice at temperature 1.0, top_p 0.7, up to 512 tokens, prompted with the template of its
``filter.py`` (read from the user's checkout, ``--memagent-repo``); a question is dropped when any of
the four responses is right by the boxed score (MemAgent's strict boxed match) or contains a gold
answer (case-insensitive). ``--max-kept K`` keeps the first K survivors, as ``filter2.py``'s ``head``.
MemAgent asks its server for both answers of a model in one request (``n=2``); memrl asks twice,
which samples the same distribution.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from memrl import interrupts
from memrl.cli.data_filter_log import AskedLog
from memrl.cli.errors import user_errors
from memrl.io.console import log_console

CLOSED_BOOK_PROMPT = (
    "Answer the question from what you know.\n\n"
    "Question:\n{question}\n\n"
    "Reply with a short answer inside \\boxed{}, for example \\boxed{Paris}."
)
METRICS = ("em", "sub_em", "f1", "memagent")
PROTOCOLS = ("memrl", "memagent")
# Per protocol: tries, temperature, top_p, max_new_tokens, metric (flags given on the command line win).
DEFAULTS = {"memrl": (1, 0.0, 1.0, 256, "sub_em"), "memagent": (2, 1.0, 0.7, 512, "memagent")}
MEMAGENT_FILTER_SCRIPT = "taskutils/memory_data/filter.py"


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
    protocol: str = "memrl"
    models: list[str] = field(default_factory=list)
    sampling: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        share = round(100 * len(self.dropped) / self.total, 2) if self.total else 0.0
        return {"input": self.input, "output": self.output, "protocol": self.protocol, "model": self.model,
                "models": self.models or [self.model], "metric": self.metric, "tries": self.tries, **self.sampling,
                "total": self.total, "kept": self.kept, "dropped": len(self.dropped),
                "dropped_percent": share, "dropped_questions": self.dropped}


@dataclass
class Asking:
    """How a question is put to a model without its document, and when the reply shows it knew the answer."""

    prompt: Callable[[Any, str], list[int]]  # (tokenizer, question) -> prompt ids
    knows: Callable[[str, Sequence[str]], str | None]  # (reply, golds) -> what was right, or None
    tries: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    wording: str = ""  # the prompt's template: answers asked with another are not reused (data_filter_log)


def memrl_asking(metric: str, tries: int, temperature: float, top_p: float, max_new_tokens: int) -> Asking:
    """memrl's own filter: its closed-book prompt; the boxed answer scores 1 on ``metric``."""
    from memrl.rewards.qa import extract_boxed, score_answer
    from memrl.workflows.common import encode_text
    from memrl.workflows.templates import TokenTemplate

    templates: dict[int, TokenTemplate] = {}  # per tokenizer: the template's pieces are tokenized once

    def prompt(tokenizer: Any, question: str) -> list[int]:
        template = templates.setdefault(id(tokenizer), TokenTemplate(CLOSED_BOOK_PROMPT, tokenizer))
        return template.render(question=encode_text(tokenizer, question))

    def knows(reply: str, golds: Sequence[str]) -> str | None:
        answer = extract_boxed(reply)
        return answer if getattr(score_answer(answer, list(golds)), metric) >= 1.0 else None

    return Asking(prompt, knows, tries, temperature, top_p, max_new_tokens, CLOSED_BOOK_PROMPT)


def memagent_asking(template: str, tries: int, temperature: float, top_p: float, max_new_tokens: int) -> Asking:
    """MemAgent's filter: its template as one chat user turn; right by strict boxed match or by containment."""
    from memrl.rewards.published import memagent_strict_reward
    from memrl.workflows.common import encode_text
    from memrl.workflows.templates import apply_chat

    def prompt(tokenizer: Any, question: str) -> list[int]:
        return encode_text(tokenizer, apply_chat(tokenizer, template.format(prompt=question)))

    def knows(reply: str, golds: Sequence[str]) -> str | None:
        boxed = any(memagent_strict_reward(reply, [g]) > 0 for g in golds)
        return reply if boxed or any(g.lower() in reply.lower() for g in golds) else None

    return Asking(prompt, knows, tries, temperature, top_p, max_new_tokens, template)


async def answered_without_context(samples: Sequence[Any], engine: Any, tokenizer: Any, asking: Asking,
                                   concurrency: int = 64, done: Any = None) -> list[str | None]:
    """Per sample: the closed-book answer that showed the model knew it (``None`` when no try did);
    ``done(position, answer)`` as each sample is settled."""
    from memrl.engines.base import SamplingParams
    from memrl.workflows.common import decode, stop_token_ids, strip_stop

    stops = stop_token_ids(tokenizer)
    params = SamplingParams(max_new_tokens=asking.max_new_tokens, stop_token_ids=stops,
                            temperature=asking.temperature, top_p=asking.top_p, greedy=asking.temperature == 0)
    sem = asyncio.Semaphore(concurrency)

    async def one(position: int, sample: Any) -> str | None:
        prompt = asking.prompt(tokenizer, sample.question)
        hit = None
        for _ in range(asking.tries):
            async with sem:
                res = await engine.generate(prompt, params)
            hit = asking.knows(decode(tokenizer, strip_stop(res.token_ids, stops)), sample.answers)
            if hit is not None:
                break
        if done is not None:
            done(position, hit)
        return hit

    return list(await asyncio.gather(*(one(j, s) for j, s in enumerate(samples))))


def _settings(input: Path, models: Sequence[str], protocol: str, metric: str, asking: Asking,
              engine: str | None, base_url: str | None) -> dict[str, Any]:
    """What an earlier run's answers must have been asked under to be reused: the input by path, size and
    modification time (an edited file can shift the questions), who answered (with ``--engine openai`` the
    server at ``--base-url``, whatever ``--model`` names) and how (the prompt's template by its hash)."""
    import hashlib

    stat = input.stat()
    return {"input": str(input.resolve()), "input_bytes": stat.st_size, "input_mtime_ns": stat.st_mtime_ns,
            "models": list(models), "engine": engine or "hf", "base_url": base_url, "protocol": protocol,
            "prompt_sha256": hashlib.sha256(asking.wording.encode()).hexdigest(), "metric": metric,
            "tries": asking.tries, "temperature": asking.temperature, "top_p": asking.top_p,
            "max_new_tokens": asking.max_new_tokens}


def _ask_all(console: Console, log: AskedLog, models: Sequence[str], samples: Sequence[Any],
             ask: Callable[[Any], list[str | None]]) -> list[str | None]:
    """``ask(advance)`` under a progress bar, going on from ``log``; on Ctrl-C what was asked stays in it."""
    from memrl.cli.progress import progress

    if log.load():
        console.print(f"going on from {log.path}: {len(log.settled)} answers of an earlier run", highlight=False,
                      markup=False)
    try:
        with progress(console, "filter", total=len(samples) * len(models), noun="questions") as bar:
            return ask(bar.advance)
    except KeyboardInterrupt:
        console.print(f"interrupted: nothing written{log.kept_note()}", highlight=False, markup=False)
        raise typer.Exit(130) from None
    except Exception:
        if log.settled:
            console.print(log.kept_note().removeprefix("; ").capitalize(), highlight=False, markup=False)
        raise
    finally:
        log.close()


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
    for flag, value in (("--tries", tries), ("--max-new-tokens", max_new_tokens), ("--concurrency", concurrency)):
        if value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}")
    if not input.is_file():
        raise ValueError(f"--input: no such file: {input}")
    if out.resolve() == input.resolve():
        raise ValueError("--out must differ from --input (the input is read while the output is written)")
    if out.suffix not in (".json", ".jsonl", ".parquet"):
        raise ValueError(f"--out must end in .json, .jsonl or .parquet, got {out.name}")


def _check_replace(out: Path, force: bool) -> None:
    """A finished filter's output (hours of questions) is replaced only with ``--force``."""
    if out.is_dir():
        raise ValueError(f"--out {out} is a folder; name the filtered file (.json, .jsonl or .parquet)")
    report = out.with_name(out.name + ".filter.json")
    if out.exists() and not force:
        what = f" (with its report {report.name})" if report.is_file() else ""
        raise ValueError(f"--out {out} exists{what}: pass --force to replace it, or choose another --out")
    if report.exists() and not force:  # the report's name is derived: the user may not know it is about to go
        raise ValueError(f"{report} exists (the report of --out {out.name} goes there): pass --force to replace it, "
                         "or choose another --out")


def _write_kept(samples: Sequence[Any], hits: Sequence[str | None], report: FilterReport, out: Path,
                schema: str, max_kept: int | None = None) -> Path:
    """Write the samples no try answered (the first ``max_kept`` of them) to ``out``, the report beside it."""
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
    kept = kept[:max_kept] if max_kept is not None else kept
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


def resolve_asking(protocol: str, metric: str | None, tries: int | None, temperature: float | None,
                   top_p: float | None, max_new_tokens: int | None, memagent_repo: Path | None) -> Asking:
    """The protocol's defaults, overridden by the flags given; MemAgent's template from the checkout."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"--protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    d_tries, d_temp, d_top_p, d_max, d_metric = DEFAULTS[protocol]
    picked = (d_tries if tries is None else tries, d_temp if temperature is None else temperature,
              d_top_p if top_p is None else top_p, d_max if max_new_tokens is None else max_new_tokens)
    metric = metric or d_metric
    if metric not in METRICS:
        raise ValueError(f"--metric must be one of {', '.join(METRICS)}, got {metric!r}")
    if not 0 < picked[2] <= 1:
        raise ValueError(f"--top-p must be in (0, 1], got {picked[2]}")
    if metric != "memagent":
        return memrl_asking(metric, *picked)
    from memrl.data.originals import MEMAGENT, checkout, read_string_constant

    template = read_string_constant(MEMAGENT, checkout(MEMAGENT, memagent_repo), MEMAGENT_FILTER_SCRIPT, "TEMPLATE")
    return memagent_asking(template, *picked)


def ask_models(models: Sequence[str], samples: Sequence[Any], asking: Asking, engine: str | None,
               base_url: str | None, concurrency: int, advance: Any = None,
               log: AskedLog | None = None) -> list[str | None]:
    """Each model in turn (one engine loaded at a time); a sample's hit is the first model's that knew it.
    ``advance(n)`` counts (model, question) pairs settled: asked, known to an earlier model, or answered in
    ``log`` by an earlier run (each new answer is recorded there)."""
    advance = advance or (lambda n=1: None)
    from memrl.cli.common import resolve_config
    from memrl.engines.factory import build_engine
    from memrl.models.resolve import config_tokenizer

    hits: list[str | None] = [None] * len(samples)
    for m, model in enumerate(models):
        earlier = log.settled if log is not None else {}
        todo = [k for k, h in enumerate(hits) if h is None and (m, k) not in earlier]
        for k, h in enumerate(hits):
            hits[k] = earlier.get((m, k)) if h is None else h
        advance(len(samples) - len(todo))  # known to an earlier model, or asked by an earlier run
        if not todo:
            continue
        cfg = resolve_config(None, None, {"model.path": model, "engine.kind": engine, "engine.base_url": base_url,
                                          "engine.concurrency": concurrency})
        tokenizer = config_tokenizer(cfg.model)
        eng = build_engine(cfg)

        def settled(j: int, hit: str | None, m: int = m, todo: list[int] = todo) -> None:
            if log is not None:
                log.record(m, todo[j], hit)
            advance()

        async def main(todo: list[int] = todo) -> list[str | None]:
            try:
                return await answered_without_context([samples[k] for k in todo], eng, tokenizer, asking,
                                                      concurrency=concurrency, done=settled)
            finally:
                await eng.close()

        with interrupts.python_sigint():  # asyncio.run's own Ctrl-C handling needs Python's handler
            answers = asyncio.run(main())
        for k, hit in zip(todo, answers):
            hits[k] = hit
    return hits


PROTOCOL_OPT = typer.Option("memrl", "--protocol", help="memrl (one model, one greedy try, its own prompt, "
                            "--metric on the boxed answer) or memagent (MemAgent's filter: --model and "
                            "--instruct-model, two tries each at T 1.0, top_p 0.7, 512 tokens, its prompt from "
                            "--memagent-repo; dropped if any reply is right by boxed match or contains a gold).")
INSTRUCT_OPT = typer.Option(None, "--instruct-model", help="A second model asked as well (MemAgent asks a base "
                            "and an instruct model); dropped if either knew the answer.")
MEMAGENT_REPO_OPT = typer.Option(None, "--memagent-repo", envvar="MEMRL_MEMAGENT_REPO", help="A checkout of "
                                 "github.com/BytedTsinghua-SIA/MemAgent, for --protocol memagent's prompt.")
MAX_KEPT_OPT = typer.Option(None, "--max-kept", help="Keep only the first K questions that survive (MemAgent "
                            "keeps 8192 training and 128 dev questions).")


@user_errors
def filter_cmd(
    input: Path = typer.Option(..., "--input", "-i", help="Long-context QA file (eval or verl training layout)."),
    model: str = typer.Option(..., "--model", "-m", help="Model that answers without the document: folder, hub "
                              "id or alias (with --engine openai: the tokenizer source)."),
    out: Path = typer.Option(..., "--out", "-o", help="Filtered file (.json, .jsonl or .parquet); the report goes "
                             "to OUT.filter.json."),
    metric: Optional[str] = typer.Option(None, "--metric", help="What counts as answered: em | sub_em | f1 (=1) on "
                                         "the boxed answer, or memagent (boxed match or containment). Default: "
                                         "sub_em; memagent under --protocol memagent."),
    tries: Optional[int] = typer.Option(None, "--tries", help="Answers per question and model; dropped if any is "
                                        "right (default 1; 2 under --protocol memagent)."),
    temperature: Optional[float] = typer.Option(None, "--temperature", help="0 = greedy (default; 1.0 under "
                                                "--protocol memagent)."),
    top_p: Optional[float] = typer.Option(None, "--top-p", help="Nucleus sampling (default 1; 0.7 under "
                                          "--protocol memagent)."),
    max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", help="Answer budget (default 256; 512 "
                                                 "under --protocol memagent)."),
    engine: Optional[str] = typer.Option(None, "--engine", "-e", help="hf (default) | openai | vllm."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="openai engine: server URL ending in /v1."),
    concurrency: int = typer.Option(64, "--concurrency", help="Questions in flight at once."),
    protocol: str = PROTOCOL_OPT,
    instruct_model: Optional[str] = INSTRUCT_OPT,
    memagent_repo: Optional[Path] = MEMAGENT_REPO_OPT,
    max_kept: Optional[int] = MAX_KEPT_OPT,
    force: bool = typer.Option(False, "--force", help="Replace --out and its report when an earlier run wrote "
                               "them (without it, such a run is refused before any question is asked)."),
) -> None:
    """Drop questions the model answers correctly without the document (MemAgent's training-data filter)."""
    from memrl.data.stream import read_samples_lazily
    from memrl.models.resolve import quiet_hub_progress

    asking = resolve_asking(protocol, metric, tries, temperature, top_p, max_new_tokens, memagent_repo)
    _check_options(input, out, metric or DEFAULTS[protocol][4], asking.tries, asking.max_new_tokens, concurrency)
    if max_kept is not None and max_kept < 1:
        raise ValueError(f"--max-kept must be >= 1, got {max_kept}")
    _check_replace(out, force)
    console = log_console()
    models = [model] + ([instruct_model] if instruct_model else [])
    if protocol == "memagent" and not instruct_model:
        console.print("note: MemAgent asks a base and an instruct model; only --model was given, so only it is "
                      "asked (add --instruct-model)", highlight=False, markup=False)
    samples = list(read_samples_lazily(input))  # questions and answers only: contexts stay on disk
    console.print(f"asking {' and '.join(models)} {len(samples)} questions without their documents "
                  f"({asking.tries} tr{'y' if asking.tries == 1 else 'ies'} each, {metric or DEFAULTS[protocol][4]})",
                  highlight=False)
    quiet_hub_progress()
    log = AskedLog(out, _settings(input, models, protocol, metric or DEFAULTS[protocol][4], asking, engine,
                                  base_url))
    hits = _ask_all(console, log, models, samples, lambda advance: ask_models(
        models, samples, asking, engine, base_url, concurrency, advance, log))
    report = FilterReport(str(input), str(out), model, metric or DEFAULTS[protocol][4], asking.tries,
                          total=len(samples), protocol=protocol, models=models,
                          sampling={"temperature": asking.temperature, "top_p": asking.top_p,
                                    "max_new_tokens": asking.max_new_tokens})
    report_path = _write_kept(samples, hits, report, out, _schema(input), max_kept)
    d = report.to_dict()
    log.finish()
    typer.echo(f"kept {d['kept']} of {d['total']} questions; dropped {d['dropped']} ({d['dropped_percent']}%) "
               f"that {' or '.join(models)} answered without the document")
    console.print(f"wrote {out} and {report_path}", highlight=False)
