"""MemAgent's data generators, reproduced: the RULER-HQA eval files and the 200-document training file.

``taskutils/memory_data/different_docs_eval.py`` writes ``eval_{N}.json`` and
``taskutils/memory_data/processing.py`` the training parquet (at MemAgent commit 76b7a65). For each
size N in ascending order and each question in order (the eval script's questions are the indices
listed in its own ``eval_200.json``: ``--indices``), they draw that sample's distractors (see
:mod:`memrl.data.paper_docs`) and put the documents through the fixed ``Random(4)`` permutation: the
question's ten paragraphs sit in the same ten slots of every sample of size N (at N=50: 10, 17, 26,
28, 36, 40, 41, 42, 43, 47). The training file is every question at exactly 200 documents.

The draws run in process-pool workers, which Python reseeds from OS entropy, so the scripts'
``random.seed(42)`` does not fix them: memrl draws size N from ``worker_rng("memagent", seed, N)``,
each sample in turn, as one worker would. An N at or past the pool shuffles the worker's copy of the
pool in place, sample after sample; each size starts from the sorted pool, as each size's new
workers do: equal to the script's run with one worker (with several, how many shuffles a sample sees
depends on which worker took it). Above 10,000 documents the script writes document-id lists from a
fresh list (``generate_index_only``): every sample of a whole-pool size has the same order, which memrl
writes as text.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from memrl.data.originals import MEMAGENT, checkout, read_string_constant
from memrl.data.paper_docs import (JsonArrayWriter, PaperPool, PaperQuestion, draw_positions, permuted,
                                   render_context, worker_rng)
from memrl.data.synth_report import FileReport, file_report
from memrl.data.tokens import TokenCounter
from memrl.io.atomic import atomic_path, atomic_write

EVAL_SCRIPT = "taskutils/memory_data/different_docs_eval.py"
TRAIN_SCRIPT = "taskutils/memory_data/processing.py"
TRAIN_DOCS = 200  # processing.py's documents per training sample
TRAIN_QUESTIONS = 80000  # processing.py's generate_dataset(80000, ...): its training file's first questions
INDEX_ONLY_ABOVE = 10000  # different_docs_eval.py writes document-id lists (generate_index_only) past this N
ProgressFn = Callable[[int], None]


def memagent_templates(repo: str | Path | None) -> tuple[str, str]:
    """The document templates of MemAgent's eval and training scripts, read from the user's checkout."""
    root = checkout(MEMAGENT, repo)
    return (read_string_constant(MEMAGENT, root, EVAL_SCRIPT, "DOCUMENT_PROMPT"),
            read_string_constant(MEMAGENT, root, TRAIN_SCRIPT, "DOCUMENT_PROMPT"))


def memagent_context(rng: random.Random, pool: PaperPool, q: PaperQuestion, n: int, template: str) -> str:
    """One sample's context, with MemAgent's draws; N at or past the pool size shuffles the pool itself, up to
    INDEX_ONLY_ABOVE documents (above, the script's ``generate_index_only`` shuffles a fresh list of ids: every
    sample gets the one permutation of the sorted pool)."""
    positions = draw_positions(rng, len(pool), q.own, n)
    if positions is None and n > INDEX_ONLY_ABOVE:  # all_docs = list(range(len(DOCS))); the pool stays sorted
        docs = permuted([pool.text(i) for i in range(len(pool))])
    elif positions is None:  # all_docs = DOCS; Random(4).shuffle(all_docs) reorders the global list
        pool.shuffle_in_place()
        docs = [pool.text(i) for i in range(len(pool))]
    else:
        docs = permuted([pool.text(i) for i in positions])
    return render_context(template, docs)


def eval_record(q: PaperQuestion, n: int, context: str) -> dict[str, Any]:
    """``different_docs_eval.py``'s record: these five fields, in this order."""
    return {"context": context, "input": q.example.question, "answers": list(q.example.answers),
            "num_docs": n, "index": q.index}


def train_record(q: PaperQuestion, n: int, context: str) -> dict[str, Any]:
    """``processing.py``'s record (verl's RL layout), fields in its order."""
    question = q.example.question
    return {"data_source": "hotpotqa", "prompt": [{"role": "user", "content": question}], "context": context,
            "ability": "memory", "reward_model": {"style": "rule", "ground_truth": list(q.example.answers)},
            "extra_info": {"index": q.index, "question": question, "num_docs": n}}


def write_eval_files(questions: Sequence[PaperQuestion], pool: PaperPool, sizes: Sequence[int],
                     paths: Sequence[Path], *, seed: int, template: str, counter: TokenCounter,
                     progress: ProgressFn | None = None) -> list[FileReport]:
    """``eval_{N}.json`` for every N, in ascending order; each size from its own RNG and the sorted pool."""
    reports = []
    for n, path in sorted(zip(sizes, paths)):
        rng = worker_rng("memagent", seed, n)
        pool.reset()
        counts, ndocs = [], []
        with atomic_write(path) as fh:
            writer = JsonArrayWriter(fh)
            for q in questions:
                context = memagent_context(rng, pool, q, n, template)
                writer.write(eval_record(q, n, context))
                counts.append(counter.count(context))
                ndocs.append(min(n, len(pool)))
                if progress:
                    progress(1)
            writer.close()
        reports.append(file_report(path, "eval", counts, ndocs, counter.name))
    return reports


def write_train_file(questions: Sequence[PaperQuestion], pool: PaperPool, path: Path, *, seed: int,
                     template: str, counter: TokenCounter, progress: ProgressFn | None = None) -> FileReport:
    """The training parquet: every question at 200 documents, from an RNG of its own (its own script)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = worker_rng("memagent-train", seed, TRAIN_DOCS)
    pool.reset()
    counts, ndocs, rows = [], [], []
    writer: Any = None

    def flush() -> None:
        nonlocal writer
        table = pa.Table.from_pylist(rows)
        writer = writer or pq.ParquetWriter(str(tmp), table.schema)
        writer.write_table(table.cast(writer.schema))
        rows.clear()

    with atomic_path(path) as tmp:
        try:
            for q in questions:
                context = memagent_context(rng, pool, q, TRAIN_DOCS, template)
                rows.append(train_record(q, TRAIN_DOCS, context))
                counts.append(counter.count(context))
                ndocs.append(min(TRAIN_DOCS, len(pool)))
                if len(rows) >= 16:
                    flush()
                if progress:
                    progress(1)
            if rows:
                flush()
        finally:
            if writer is not None:
                writer.close()
    return file_report(path, "train", counts, ndocs, counter.name)
