"""ReMemR1's test-file generator, reproduced (``taskutils/data_synthesis/process_test.py``, commit 43e69f3).

What it does, and so what this module does:

* questions are read in file order; one that cites a title missing from its context is skipped
  (``index`` counts the kept ones); the question is stripped and gets a ``?`` when it lacks one;
* ``evidence_idx`` has one entry per supporting *sentence*: the position, in the question's own
  paragraph list, of the first paragraph with that title (a title cited twice appears twice);
* the module RNG is seeded once (``--seed``, 42); for each N of its fixed list (50 ... 6400) the
  parent process picks the questions, ``random.sample`` of ``5 x n_subset`` question indices (every
  question, in order, when there are fewer than ``n_subset``); the run script does hotpotqa, then
  2wikimultihopqa, in one process, so the second dataset's picks continue the first's RNG
  (``--follows``); then workers draw each sample's documents as MemAgent does
  (:mod:`memrl.data.paper_docs`) and permute them with the fixed ``Random(4)`` permutation;
* ``evidence_idx`` is mapped through that permutation; ``min_distance`` is the smallest gap between
  neighbouring sorted positions (0 when a title is cited twice); ``is_(reverse_)ordered`` compare
  the list with its sorted (reversed) self;
* ``eval_{dataset}_{N}.json`` holds the first ``n_subset`` samples; ``..._min_distance_{D}.json``
  the first ``n_subset`` of all drawn samples with ``min_distance >= D`` that are reverse-ordered,
  for D in 100, 200, 400, 800, 1600, and no file when none qualifies.

The question picks are deterministic and memrl replays them exactly: the parent RNG advances only
through the picks of every size of the script's list up to the largest asked for, plus 24 bits the
``rich`` library takes from it (``rich.style``'s id counter) when the script's ``utils`` first prints,
inside the first size, after its pick. A size outside the script's list gets its picks from an RNG
of its own. The document draws run in forked workers, which Python reseeds from OS entropy, so no
run of the script repeats them; memrl draws size N from ``worker_rng("rememr1", seed, N)``. At N past
the pool there is no draw, and those files equal the script's. Without ``--max-samples`` every
question is used (the script's ``n_subset`` above the question count).
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memrl.data.errors import DataError
from memrl.data.hotpotqa import QAExample
from memrl.data.originals import REMEMR1, checkout, read_string_constant
from memrl.data.paper_docs import (JsonArrayWriter, PaperPool, PaperQuestion, draw_positions, fixed_permutation,
                                   render_context, worker_rng)
from memrl.data.synth_report import FileReport, file_report
from memrl.data.tokens import TokenCounter
from memrl.io.atomic import atomic_write

SCRIPT = "taskutils/data_synthesis/process_test.py"
VARIANT_DISTANCES = (100, 200, 400, 800, 1600)
SUBSET_FACTOR = 5  # the script draws 5 x n_subset questions per N, then keeps the first n_subset
SCRIPT_SIZES = (50, 100, 200, 400, 800, 1600, 3200, 6400)  # its main loop's lengths, in order
RICH_ID_BITS = 24  # rich.style: count(getrandbits(24)) on the global RNG, at the script's first rich print
ProgressFn = Callable[[int], None]


def rememr1_template(repo: str | Path | None) -> str:
    """The document template of ReMemR1's test script, read from the user's checkout."""
    return read_string_constant(REMEMR1, checkout(REMEMR1, repo), SCRIPT, "DOCUMENT_PROMPT")


def rememr1_question_text(question: str) -> str:
    """Stripped, with a ``?`` appended when it does not end in one."""
    q = question.strip()
    return q if q.endswith("?") else q + "?"


def evidence_of(q: PaperQuestion) -> list[int]:
    """Per supporting sentence, the position of the first own paragraph with its title."""
    titles = [p.title for p in q.example.paragraphs]
    return [titles.index(t) for t in q.example.fact_titles]


def usable(example: QAExample) -> bool:
    """The script keeps a question only when every supporting title is one of its paragraphs."""
    titles = {p.title for p in example.paragraphs}
    return all(t in titles for t in example.fact_titles)


@dataclass
class Layout:
    """One drawn sample: its documents (pool ids, context order) and ReMemR1's evidence fields.

    Every drawn sample is held until the variants are filtered (as the script holds them, contexts
    and all); the ids are a 4-byte ``array``, so 5 x 128 questions at all eight sizes take ~33 MB.
    """

    question: PaperQuestion
    n: int
    docs: array
    fields: dict[str, Any]


def layout(rng: random.Random, pool: PaperPool, q: PaperQuestion, n: int, source: str) -> Layout:
    """One sample with the script's draws and its evidence fields."""
    positions = draw_positions(rng, len(pool), q.own, n)
    ids = list(range(len(pool))) if positions is None else positions
    perm = fixed_permutation(len(ids))
    evidence = [perm.index(e) for e in evidence_of(q)]
    ordered = sorted(evidence)
    if len(ordered) < 2:
        raise DataError(source, q.row, "supporting_facts",
                        "ReMemR1's min_distance needs at least two supporting facts; this question has "
                        f"{len(ordered)}")
    return Layout(q, n, array("i", [ids[p] for p in perm]), {
        "is_ordered": evidence == ordered,
        "is_reverse_ordered": evidence == sorted(evidence, reverse=True),
        "min_distance": min(abs(ordered[i + 1] - ordered[i]) for i in range(len(ordered) - 1)),
        "evidence_idx": evidence,
    })


def check_subset(n_questions: int, n_subset: int | None) -> None:
    """Refuse a ``--max-samples`` for which the script's ``random.sample`` would fail."""
    if n_subset is not None and n_questions >= n_subset and SUBSET_FACTOR * n_subset > n_questions:
        raise ValueError(f"--max-samples {n_subset}: ReMemR1 draws {SUBSET_FACTOR} x {n_subset} = "
                         f"{SUBSET_FACTOR * n_subset} of the {n_questions} questions, more than there are; use "
                         f"at most {n_questions // SUBSET_FACTOR}, or more than {n_questions} to take every question")


def _pick(rng: random.Random, n_questions: int, n_subset: int | None) -> list[int]:
    """One size's questions: ``5 x n_subset`` drawn, or all of them in order when there are fewer than ``n_subset``."""
    if n_subset is None or n_questions < n_subset:
        return list(range(n_questions))
    return rng.sample(range(n_questions), SUBSET_FACTOR * n_subset)


def question_picks(n_questions: int, sizes: Sequence[int], *, seed: int, n_subset: int | None,
                   follows: Sequence[int] = ()) -> dict[int, list[int]]:
    """Each size's question indices, as the script's parent process picks them.

    ``follows``: the question counts of the datasets the same run processed before this one (ReMemR1's
    run script: hotpotqa, then 2wikimultihopqa), whose picks the RNG went through first.
    """
    parent = random.Random(seed)
    wanted = sorted(set(sizes))
    first = True
    out: dict[int, list[int]] = {}
    for count, keep in [*((c, False) for c in follows), (n_questions, True)]:
        for n in SCRIPT_SIZES:
            if keep and n > wanted[-1]:
                break
            picked = _pick(parent, count, n_subset)
            if first:  # rich's import, inside the first generate_dataset, after its pick
                parent.getrandbits(RICH_ID_BITS)
                first = False
            if keep:
                out[n] = picked
    for n in wanted:
        if n not in out:
            out[n] = _pick(random.Random(f"rememr1-questions:{seed}:{n}"), n_questions, n_subset)
    return {n: out[n] for n in wanted}


def draw_layouts(questions: Sequence[PaperQuestion], pool: PaperPool, sizes: Sequence[int], *, seed: int,
                 n_subset: int | None, source: str, follows: Sequence[int] = ()) -> dict[int, list[Layout]]:
    """Every drawn sample per N: the script's question picks, then each sample's documents."""
    picks = question_picks(len(questions), sizes, seed=seed, n_subset=n_subset, follows=follows)
    out: dict[int, list[Layout]] = {}
    for n, picked in picks.items():
        rng = worker_rng("rememr1", seed, n)
        out[n] = [layout(rng, pool, questions[i], n, source) for i in picked]
    return out


def variant(layouts: Sequence[Layout], distance: int | None, n_subset: int | None) -> list[Layout]:
    """The plain file's samples (``distance`` None) or a distance variant's, capped at ``n_subset``."""
    if distance is not None:
        layouts = [x for x in layouts if x.fields["min_distance"] >= distance and x.fields["is_reverse_ordered"]]
    return list(layouts[:n_subset] if n_subset is not None else layouts)


def record(x: Layout, pool: PaperPool, template: str) -> dict[str, Any]:
    """The script's record, fields in its order."""
    ex = x.question.example
    return {"context": render_context(template, [pool.texts[i] for i in x.docs]),
            "input": rememr1_question_text(ex.question), "answers": list(ex.answers), "num_docs": x.n,
            "index": x.question.index, **x.fields, "level": ex.level, "type": ex.type, "id": ex.id}


def write_file(layouts: Sequence[Layout], pool: PaperPool, path: Path, *, template: str, counter: TokenCounter,
               progress: ProgressFn | None = None) -> FileReport:
    """One ReMemR1 JSON file, record by record."""
    counts, ndocs = [], []
    with atomic_write(path) as fh:
        writer = JsonArrayWriter(fh)
        for x in layouts:
            rec = record(x, pool, template)
            writer.write(rec)
            counts.append(counter.count(rec["context"]))
            ndocs.append(len(x.docs))
            if progress:
                progress(1)
        writer.close()
    return file_report(path, "eval", counts, ndocs, counter.name)
