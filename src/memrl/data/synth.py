"""Long-context QA synthesis (RULER-HQA / MemAgent style).

For each question: its gold paragraphs, (by default) its own distractor
paragraphs, then random distractors drawn from the pool of every other
paragraph, shuffled and numbered as documents. One eval file per document
count N, and optionally a training file filled up to a token budget.

Every sample has its own seeded RNG (seed, N, question), so files are
reproducible, samples are independent of each other, and gold documents land
at different positions in different samples. The context is streamed to disk
document by document: time is linear in the output size and memory holds the
paragraph pool plus O(N) integers per sample (plus one sample's text when an
exact tokenizer has to count it whole).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from memrl.io.atomic import remove_stale_temps, staging_dir
from memrl.data.budget import check_token_budget
from memrl.data.distance import EvidenceOrder, check_min_distance, evidence_fields, place_evidence
from memrl.data.errors import DataError
from memrl.data.hotpotqa import read_paragraph_pool
from memrl.data.longctx import DOC_SEPARATOR, Format, LongContextSample, SampleWriter, document_header
from memrl.data.names import eval_file_name, parse_token_budget, train_file_name
from memrl.data.questions import ParagraphPool, Question, load_questions
from memrl.data.surrogates import check_surrogates
from memrl.data.synth_report import FileReport, file_report
from memrl.data.tokens import TokenCounter, load_token_counter
from memrl.data.twowiki import dataset_name

__all__ = ["FileReport", "ParagraphPool", "Question", "SynthPlan", "Synthesizer", "load_questions",
           "parse_token_budget", "plan_synthesis", "train_file_name"]


ProgressFn = Callable[[int], None]


def _sample_distinct(rng: random.Random, pool_size: int, k: int, exclude: set[int]) -> list[int]:
    """``k`` distinct ids from ``range(pool_size)`` minus ``exclude`` (caller checked k fits)."""
    if k <= 0:
        return []
    picks = rng.sample(range(pool_size), min(pool_size, k + len(exclude)))
    return [i for i in picks if i not in exclude][:k]


class Synthesizer:
    """Builds long-context samples from questions and a paragraph pool."""

    def __init__(
        self,
        questions: Sequence[Question],
        pool: ParagraphPool,
        counter: TokenCounter,
        *,
        source: str = "input",
        seed: int = 42,
        allow_repeats: bool = False,
        include_question_distractors: bool = True,
        min_distance: int | None = None,
        evidence_order: EvidenceOrder = "any",
    ) -> None:
        if not questions:
            raise ValueError(f"{source}: no questions to synthesize from")
        self.questions = list(questions)
        self.pool = pool
        self.counter = counter
        self.source = source
        self.seed = seed
        self.allow_repeats = allow_repeats
        self.include_question_distractors = include_question_distractors
        self.min_distance, self.evidence_order = min_distance, evidence_order
        self._header_tokens: dict[int, int] = {}
        self._sep_tokens = counter.count(DOC_SEPARATOR)

    # -- checks ---------------------------------------------------------------
    def check_docs(self, n: int) -> None:
        """Fail before writing anything if some question cannot get ``n`` documents."""
        for q in self.questions:
            if n < len(q.gold):
                raise DataError(self.source, q.row, "supporting_facts",
                                f"--docs {n} is fewer than this question's {len(q.gold)} gold paragraphs")
            if self.min_distance:
                check_min_distance(n, len(q.gold), self.min_distance)
            if self.allow_repeats:
                continue
            available = len(self.pool) - len(q.own) + len(q.gold)
            if self.include_question_distractors:
                available += len(q.own_distractors)
            if n > available:
                raise DataError(
                    self.source, q.row, "context",
                    f"--docs {n} needs {n} distinct paragraphs but only {available} are available "
                    f"(pool of {len(self.pool)}); add distractor paragraphs with --pool FILE "
                    "or pass --allow-repeats",
                )

    # -- document choice ---------------------------------------------------------
    def _rng(self, tag: str, q: Question) -> random.Random:
        return random.Random(f"memrl-synth:{self.seed}:{tag}:{q.row}:{q.example.id}")

    def _base_docs(self, rng: random.Random, q: Question, n: int | None) -> list[int]:
        docs = list(q.gold)
        if self.include_question_distractors:
            own = list(q.own_distractors)
            rng.shuffle(own)
            room = len(own) if n is None else max(0, n - len(docs))
            docs += own[:room]
        return docs

    def choose_docs(self, q: Question, n: int) -> list[int]:
        """Pool ids of the ``n`` documents of question ``q``, in context order."""
        rng = self._rng(f"docs={n}", q)
        docs = self._base_docs(rng, q, n)
        need = n - len(docs)
        exclude = q.own
        available = len(self.pool) - len(exclude)
        if need <= available:
            docs += _sample_distinct(rng, len(self.pool), need, exclude)
        else:  # only reachable with allow_repeats (check_docs guards the rest)
            rest = [i for i in range(len(self.pool)) if i not in exclude]
            rng.shuffle(rest)
            docs += rest + rng.choices(rest or docs, k=need - len(rest))
        rng.shuffle(docs)
        if self.min_distance or self.evidence_order != "any":  # ReMemR1's distance variants
            docs = place_evidence(rng, docs, q.evidence, self.min_distance or 1, self.evidence_order)
        return docs

    def choose_docs_by_tokens(self, q: Question, budget: int) -> list[int]:
        """Gold (+ own distractors) then random distractors while the context fits ``budget``."""
        rng = self._rng(f"tokens={budget}", q)
        docs = self._base_docs(rng, q, None)
        used = set(docs)
        total = sum(self._doc_tokens(i + 1, pid) for i, pid in enumerate(docs))
        if total > budget:
            raise DataError(self.source, q.row, "context",
                            f"the question's own paragraphs take {total} tokens, over the budget of {budget}")
        misses, exclude = 0, q.own
        while misses < 64:
            pid = rng.randrange(len(self.pool))
            if pid in exclude or (pid in used and not self.allow_repeats):
                misses += 1
                continue
            cost = self._doc_tokens(len(docs) + 1, pid)
            if total + cost > budget:  # too long here; a shorter paragraph may still fit
                misses += 1
                continue
            docs.append(pid)
            used.add(pid)
            total += cost
            misses = 0
        rng.shuffle(docs)
        return docs

    # -- rendering -------------------------------------------------------------
    def _doc_tokens(self, number: int, pid: int) -> int:
        head = self._header_tokens.get(number)
        if head is None:
            head = self.counter.count(document_header(number))
            self._header_tokens[number] = head
        sep = self._sep_tokens if number > 1 else 0
        return sep + head + self.pool.tokens(pid, self.counter)

    def _pieces(self, docs: Sequence[int]) -> Iterator[str]:
        for k, pid in enumerate(docs):
            if k:
                yield DOC_SEPARATOR
            yield document_header(k + 1)
            yield self.pool.paragraphs[pid].render()

    def _sample(self, q: Question, index: int, docs: list[int]) -> LongContextSample:
        gold = set(q.gold)
        ex = q.example
        extra = {k: v for k, v in (("type", ex.type), ("level", ex.level)) if v is not None}
        extra.update(evidence_fields(docs, q.evidence))
        return LongContextSample(
            index=index,
            question=ex.question,
            answers=list(ex.answers),
            context="",
            num_docs=len(docs),
            id=ex.id,
            gold_docs=[k + 1 for k, pid in enumerate(docs) if pid in gold],
            extra=extra,
        )

    def _render(self, q: Question, docs: list[int], budget: int | None) -> tuple[list[int], Iterable[str], int]:
        """Final documents, context pieces and their token count.

        The approximate counter never crosses document boundaries, so per-document
        sums are exact for it and the context is streamed. Real tokenizers can
        merge tokens across boundaries (Qwen's merges ``.\\n\\n``), so the sample
        is tokenized whole (memory: one sample's text) and, for a budget,
        random distractors are dropped until it fits.
        """
        if not self.counter.exact:
            return docs, self._pieces(docs), sum(self._doc_tokens(k + 1, p) for k, p in enumerate(docs))
        while True:
            text = "".join(self._pieces(docs))
            n = self.counter.count(text)
            if budget is None or n <= budget:
                return docs, [text], n
            own = q.own
            drop = next((k for k in range(len(docs) - 1, -1, -1) if docs[k] not in own), None)
            if drop is None:
                raise DataError(self.source, q.row, "context",
                                f"the question's own paragraphs take {n} tokens, over the budget of {budget}")
            docs = docs[:drop] + docs[drop + 1:]

    def _write(self, path: Path, kind: str, schema: str, fmt: Format | None,
               choose: Callable[[Question], list[int]], budget: int | None,
               progress: ProgressFn | None) -> FileReport:
        counts: list[int] = []
        ndocs: list[int] = []
        with SampleWriter(path, schema, fmt) as writer:  # type: ignore[arg-type]
            for index, q in enumerate(self.questions):
                docs, pieces, n_tokens = self._render(q, choose(q), budget)
                writer.write(self._sample(q, index, docs), pieces)
                counts.append(n_tokens)
                ndocs.append(len(docs))
                if progress:
                    progress(1)
        return file_report(path, kind, counts, ndocs, self.counter.name)

    def write_eval_file(self, n: int, path: Path, fmt: Format = "json",
                        progress: ProgressFn | None = None) -> FileReport:
        self.check_docs(n)
        return self._write(path, "eval", "eval", fmt, lambda q: self.choose_docs(q, n), None, progress)

    def write_train_file(self, budget: int, path: Path, progress: ProgressFn | None = None) -> FileReport:
        return self._write(path, "train", "train", "parquet",
                           lambda q: self.choose_docs_by_tokens(q, budget), budget, progress)


@dataclass
class SynthPlan:
    """Everything ``memrl data synth`` needs, validated before any file is written."""

    synth: Synthesizer
    docs: list[int]
    train_tokens: int | None
    out: Path
    fmt: Format
    name_as: str | None = None  # a dataset name: ReMemR1's eval_{dataset}_{N}[_min_distance_{D}] file names

    @property
    def total_samples(self) -> int:
        files = len(self.docs) + (1 if self.train_tokens else 0)
        return files * len(self.synth.questions)

    def eval_path(self, n: int) -> Path:
        return self.out / eval_file_name(n, self.fmt, dataset=self.name_as, min_distance=self.synth.min_distance)

    def output_names(self) -> list[str]:
        """The files :meth:`run` writes in ``out`` (for the folder's manifest)."""
        train = [train_file_name(self.train_tokens)] if self.train_tokens else []
        return [self.eval_path(n).name for n in self.docs] + train

    def run(self, progress: ProgressFn | None = None) -> list[FileReport]:
        """Write every file in a staging folder, then move them all into ``out``: a size that fails leaves
        none of this run's files behind (a half-finished set would look complete to ``memrl eval``)."""
        finals = [self.eval_path(n) for n in self.docs]
        if self.train_tokens:
            finals.append(self.out / train_file_name(self.train_tokens))
        for final in finals:
            remove_stale_temps(final)  # what a killed run left (its staging folder is one of them)
        with staging_dir(finals[0]) as stage:
            reports = [self.synth.write_eval_file(n, stage / self.eval_path(n).name, self.fmt, progress)
                       for n in self.docs]
            if self.train_tokens:
                reports.append(self.synth.write_train_file(self.train_tokens, stage / finals[-1].name, progress))
            for final in finals:
                os.replace(stage / final.name, final)
        return [replace(r, path=str(final)) for r, final in zip(reports, finals)]


def plan_synthesis(
    input_path: str | Path,
    out: str | Path,
    docs: Iterable[int] = (),
    *,
    train_tokens: int | None = None,
    pool_files: Iterable[str | Path] = (),
    tokenizer: str | None = None,
    seed: int = 42,
    allow_repeats: bool = False,
    include_question_distractors: bool = True,
    fmt: Format = "json",
    max_samples: int | None = None,
    dataset: str = "hotpotqa",
    min_distance: int | None = None,
    evidence_order: EvidenceOrder | None = None,
    rememr1_names: bool = False,
) -> SynthPlan:
    """Load and validate everything; raises :class:`DataError` before any output exists.

    ``min_distance``/``evidence_order`` lay out the evidence of eval samples as ReMemR1's distance
    variants (order defaults to ``reverse`` with a distance, as ReMemR1's, else ``any``).
    """
    docs = sorted(set(int(n) for n in docs))
    if not docs and not train_tokens:
        raise ValueError("nothing to do: give document counts (--docs 50,100) and/or --train-tokens")
    name = dataset_name(dataset)
    if min_distance is not None and min_distance < 1:
        raise ValueError(f"--min-distance must be at least 1, got {min_distance}")
    if (min_distance or evidence_order) and train_tokens:
        raise ValueError("--min-distance/--evidence-order lay out eval files; leave out --train-tokens")
    pool = ParagraphPool()
    questions = load_questions(input_path, pool, max_samples)
    pool_files = list(pool_files)
    for extra in pool_files:
        for p in read_paragraph_pool(extra):
            pool.add(p)
    check_surrogates(input_path, questions, pool, pool_files)
    synth = Synthesizer(
        questions, pool, load_token_counter(tokenizer), source=str(input_path), seed=seed,
        allow_repeats=allow_repeats, include_question_distractors=include_question_distractors,
        min_distance=min_distance, evidence_order=evidence_order or ("reverse" if min_distance else "any"),
    )
    for n in docs:
        synth.check_docs(n)
    if train_tokens and not allow_repeats:
        check_token_budget(questions, len(pool), lambda pid: synth._doc_tokens(2, pid), train_tokens,
                           include_question_distractors=include_question_distractors, source=str(input_path))
    return SynthPlan(synth=synth, docs=docs, train_tokens=train_tokens, out=Path(out), fmt=fmt,
                     name_as=name if rememr1_names else None)
