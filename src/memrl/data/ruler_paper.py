"""``memrl data ruler --protocol ruler|memagent``: the papers' own RULER generators, sample for sample.

``ruler`` is NVIDIA RULER at HEAD (c3f5e3b), ``memagent`` the copy in MemAgent's
``taskutils/memory_data/synthetic`` (76b7a65). For a given seed, tokenizer and input files the
records are byte-identical to what the originals' scripts write for that task and length
(``prepare.py`` / ``ruler_data_prepare.py`` with model template ``base``, no newline removal):
every field of the original record, under its own name and with its own value, including RULER's
``index`` of niah (the answer's character offset: the script reuses that variable). memrl adds
what its reader needs: ``context`` (the haystack, which RULER embeds in ``input``), ``answers``
(= ``outputs``), ``num_docs``, ``gold_docs`` (QA), ``id``, ``task``, ``target_length``,
``metric``, ``protocol``, and, under ``ruler``, ``question``: RULER's input with the haystack cut
out, which is what the memory agent is asked beside each chunk.

What is deterministic: everything, given the seed, the tokenizer (``--tokenizer``; without one,
memrl's approximate count stands in for the original's tokenizer, so sizes differ from a run with
a real one), the essay file, NLTK's punkt (memrl falls back to its own splitter without it) and
the QA file. MemAgent runs 8 chunks in parallel processes (seed 42+i each) and concatenates them in
``glob`` order, which the file system decides; ``--chunks N`` makes the same chunks, concatenated
in chunk order.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

from memrl.data.longctx import LongContextSample
from memrl.io.atomic import atomic_write
from memrl.data.ruler import RulerFileReport, write_samples_file
from memrl.data.ruler_paper_niah import niah_records
from memrl.data.ruler_paper_qa import qa_records
from memrl.data.ruler_paper_run import PaperInputs, PaperRecord, PaperRun
from memrl.data.ruler_paper_tasks import cwe_records, fwe_records, vt_records
from memrl.data.ruler_paper_text import PaperText
from memrl.data.tokens import TokenCounter

PAPER_PROTOCOLS = ("ruler", "memagent")
# The task lists of the originals' run scripts: RULER's config_tasks.sh, MemAgent's ruler_data_prepare.sh.
PAPER_TABLES = {
    "ruler": ("niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
              "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe", "qa_1", "qa_2"),
    "memagent": ("niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
                 "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt", "fwe", "qa_1"),
}
# Samples per task in the run scripts (NUM_SAMPLES).
PAPER_SAMPLES = {"ruler": 500, "memagent": 128}
_FAMILIES: dict[str, Callable[..., list[PaperRecord]]] = {
    "niah": niah_records, "variable_tracking": vt_records, "common_words_extraction": cwe_records,
    "freq_words_extraction": fwe_records,
}


def chunk_sizes(samples: int, chunks: int) -> list[int]:
    """The prepare scripts' split of ``samples`` over ``chunks`` processes."""
    return [samples // chunks + (1 if i < samples % chunks else 0) for i in range(chunks)]


def paper_records(text: PaperText, task: str, length: int, counter: TokenCounter, *, samples: int, seed: int,
                  inputs: PaperInputs, chunks: int = 1) -> list[PaperRecord]:
    """The original's records for ``task`` at ``length``: chunk ``i`` is a process seeded ``seed + i``."""
    out: list[PaperRecord] = []
    sizes = chunk_sizes(samples, chunks)
    for i, n in enumerate(sizes):
        if n == 0:
            continue
        run = PaperRun(text, task, length, seed + i, counter.count, inputs)
        if run.family == "qa":
            out += qa_records(run, n, pre_samples=sum(sizes[:i]))
        elif run.family in _FAMILIES:
            out += _FAMILIES[run.family](run, n)
        else:
            raise ValueError(f"--tasks: {task} is a {run.family!r} task, which memrl does not reproduce")
    return out


def _metric(family: str) -> str:
    return "string_match_part" if family == "qa" else "string_match_all"


def paper_samples(text: PaperText, task: str, length: int, counter: TokenCounter, *, samples: int, seed: int,
                  inputs: PaperInputs, chunks: int = 1,
                  records: list[PaperRecord] | None = None) -> Iterator[LongContextSample]:
    """The records as memrl samples (original fields kept verbatim; see the module docstring); ``records``:
    :func:`paper_records`' list, when the caller already has it."""
    if records is None:
        records = paper_records(text, task, length, counter, samples=samples, seed=seed, inputs=inputs,
                                chunks=chunks)
    family = str(text.configs[task]["task"])
    ttg = int(text.tasks[family]["tokens_to_generate"])
    for i, rec in enumerate(records):
        orig = dict(rec.original)
        tokens = orig["length"] - ttg if "length" in orig else counter.count(orig["input"] + rec.context)
        extra = {k: v for k, v in orig.items() if k not in ("index", "input", "context")}
        extra.update(task=task, target_length=length, tokens=tokens, metric=_metric(family), answer_tokens=ttg,
                     protocol=text.flavour.name)
        if text.flavour.name == "ruler":
            extra["question"] = rec.question
        yield LongContextSample(index=int(orig["index"]), question=orig["input"], answers=list(orig["outputs"]),
                                context=rec.context, num_docs=rec.num_docs, id=f"{task}-{length}-{i}",
                                gold_docs=list(rec.gold_docs), extra=extra)


def write_paper_task_file(out: Path, task: str, length: int, counter: TokenCounter, *, text: PaperText,
                          samples: int, seed: int, inputs: PaperInputs, chunks: int = 1,
                          progress: Callable[[int], None] | None = None) -> RulerFileReport:
    """Write ``out/ruler_{task}_{length}.jsonl`` atomically; returns its token report. Under MemAgent's flavour
    also its own file, ``eval_{task}_{length}.json`` (its records as its ruler_data_prepare.py dumps them: one
    JSON array, indent 4), which MemAgent's ruler_general.py reads from its DATAROOT unchanged."""
    records = paper_records(text, task, length, counter, samples=samples, seed=seed, inputs=inputs, chunks=chunks)
    report = write_samples_file(out, task, length, counter, paper_samples(
        text, task, length, counter, samples=samples, seed=seed, inputs=inputs, chunks=chunks, records=records),
        progress)
    if text.flavour.name == "memagent":
        with atomic_write(out / memagent_file_name(task, length)) as f:
            json.dump([r.original for r in records], f, indent=4)
    return report


def memagent_file_name(task: str, length: int) -> str:
    """MemAgent's name for a RULER file (ruler_data_prepare.py's save_name)."""
    return f"eval_{task}_{length}.json"
