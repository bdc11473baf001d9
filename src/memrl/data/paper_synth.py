"""``memrl data synth --protocol memagent|rememr1``: the papers' own data generators, planned and run.

The plan reads the input and the user's checkout of the paper's repository, checks everything
(and, for ReMemR1, draws every sample, which decides which distance variants exist) before any
file is written; :meth:`PaperPlan.run` then writes all files in a staging folder and moves them in
together, as memrl's own protocol does. See :mod:`memrl.data.memagent_synth` and
:mod:`memrl.data.rememr1_synth` for what each paper does.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from memrl.data import memagent_synth as ma
from memrl.data import rememr1_synth as rr
from memrl.data.hotpotqa import Paragraph, read_paragraph_pool
from memrl.data.names import eval_file_name, train_file_name
from memrl.data.paper_docs import PaperPool, PaperQuestion, check_own_fits
from memrl.data.synth_report import FileReport
from memrl.data.tokens import TokenCounter, load_token_counter
from memrl.data.twowiki import dataset_name, read_multihop
from memrl.io.atomic import remove_stale_temps, staging_dir

PROTOCOLS = ("memrl", "memagent", "rememr1")
ProgressFn = Callable[[int], None]


@dataclass
class PaperPlan:
    """Validated inputs of one paper-protocol run, and the files it will write (name -> what)."""

    protocol: str
    questions: list[PaperQuestion]
    pool: PaperPool
    out: Path
    counter: TokenCounter
    seed: int
    template: str
    train_template: str = ""
    eval_sizes: list[int] = field(default_factory=list)
    train_name: str | None = None
    # ReMemR1: file name -> the samples it holds (plain files and the variants that have samples)
    rememr1_files: dict[str, list[rr.Layout]] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)
    eval_names: dict[int, str] = field(default_factory=dict)

    def output_names(self) -> list[str]:
        if self.protocol == "rememr1":
            return list(self.rememr1_files)
        return [self.eval_names[n] for n in self.eval_sizes] + ([self.train_name] if self.train_name else [])

    @property
    def total_samples(self) -> int:
        if self.protocol == "rememr1":
            return sum(len(v) for v in self.rememr1_files.values())
        train = min(len(self.questions), ma.TRAIN_QUESTIONS) if self.train_name else 0
        return len(self.questions) * len(self.eval_sizes) + train

    def _write_all(self, stage: Path, progress: ProgressFn | None) -> list[FileReport]:
        if self.protocol == "rememr1":
            return [rr.write_file(layouts, self.pool, stage / name, template=self.template, counter=self.counter,
                                  progress=progress) for name, layouts in self.rememr1_files.items()]
        reports = ma.write_eval_files(self.questions, self.pool, self.eval_sizes,
                                      [stage / self.eval_names[n] for n in self.eval_sizes], seed=self.seed,
                                      template=self.template, counter=self.counter, progress=progress)
        if self.train_name:
            reports.append(ma.write_train_file(self.questions[:ma.TRAIN_QUESTIONS], self.pool, stage / self.train_name,
                                               seed=self.seed,
                                               template=self.train_template, counter=self.counter,
                                               progress=progress))
        return reports

    def run(self, progress: ProgressFn | None = None) -> list[FileReport]:
        """Write every file in a staging folder, then move them all into ``out`` (none if one fails)."""
        finals = [self.out / name for name in self.output_names()]
        if not finals:
            return []
        for final in finals:
            remove_stale_temps(final)
        with staging_dir(finals[0]) as stage:
            reports = self._write_all(stage, progress)
            for final in finals:
                os.replace(stage / final.name, final)
        return [replace(r, path=str(self.out / Path(r.path).name)) for r in reports]


def _load(input_path: Path, pool_files: Iterable[str | Path], protocol: str) -> tuple[list[PaperQuestion], PaperPool]:
    """Questions in the script's order and the sorted pool of every paragraph (input and ``--pool`` files)."""
    examples = list(read_multihop(input_path, strict_facts=protocol != "rememr1", any_gold=True))
    extra: list[Paragraph] = [p for f in pool_files for p in read_paragraph_pool(f)]
    pool = PaperPool([p for ex in examples for p in ex.paragraphs] + extra)
    questions = [PaperQuestion(index=0, row=row, example=ex, own=pool.ids(ex.paragraphs))
                 for row, ex in enumerate(examples, start=1)]
    if protocol == "rememr1":
        questions = [q for q in questions if rr.usable(q.example)]
    for k, q in enumerate(questions):
        q.index = k
    if not questions:
        raise ValueError(f"--input {input_path}: no questions to synthesize from")
    return questions, pool


def _empty_golds(questions: list[PaperQuestion]) -> list[str]:
    """A notice for questions whose gold answer normalises to nothing: the scripts keep them (memrl's own
    generator refuses them), and any answer scores on them by containment."""
    from memrl.rewards.qa import normalize_answer

    rows = [q.row for q in questions if any(not normalize_answer(a) for a in q.example.answers)]
    if not rows:
        return []
    return [f"{len(rows)} question(s) have a gold answer that normalises to nothing (input row {rows[0]} first): "
            "kept, as the paper's script keeps them; any answer scores on them by containment"]


def _read_indices(path: Path, n_questions: int) -> list[int]:
    """Question indices from a JSON list of numbers or of records with ``index`` (MemAgent's ``eval_200.json``)."""
    import json

    try:
        items = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"--indices {path}: not a readable JSON list ({exc})") from None
    if not isinstance(items, list) or not items:
        raise ValueError(f"--indices {path}: expected a non-empty JSON list of indices or of records with 'index'")
    out = []
    for k, item in enumerate(items):
        index = item.get("index") if isinstance(item, dict) else item
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < n_questions:
            raise ValueError(f"--indices {path}: item {k}: {index!r} is not a question index of the input "
                             f"(0..{n_questions - 1})")
        out.append(index)
    return out


def _check_flags(protocol: str, docs: list[int], train_tokens: int | None, min_distance: int | None) -> None:
    if protocol not in PROTOCOLS:
        raise ValueError(f"--protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    if not docs and not train_tokens:
        raise ValueError("nothing to do: give document counts (--docs 50,100) and/or --train-tokens")
    if protocol == "rememr1" and train_tokens:
        raise ValueError("--train-tokens: ReMemR1's script writes test files only; leave it out with "
                         "--protocol rememr1")
    if protocol == "memagent" and min_distance is not None:
        raise ValueError("--min-distance: MemAgent has no distance variants; use --protocol rememr1 or memrl")
    if min_distance is not None and min_distance < 1:
        raise ValueError(f"--min-distance must be at least 1, got {min_distance}")


def plan_paper_synthesis(protocol: str, input_path: str | Path, out: str | Path, docs: Iterable[int] = (), *,
                         train_tokens: int | None = None, pool_files: Iterable[str | Path] = (),
                         tokenizer: str | None = None, seed: int = 42, max_samples: int | None = None,
                         dataset: str = "hotpotqa", min_distance: int | None = None, rememr1_names: bool = False,
                         memagent_repo: str | Path | None = None, rememr1_repo: str | Path | None = None,
                         indices: str | Path | None = None, follows: Iterable[str | Path] = ()) -> PaperPlan:
    """Everything a paper-protocol run needs, checked (and for ReMemR1 drawn) before anything is written."""
    sizes = sorted(set(int(n) for n in docs))
    follows = list(follows)
    _check_flags(protocol, sizes, train_tokens, min_distance)
    if indices is not None and protocol != "memagent":
        raise ValueError("--indices: MemAgent's eval script takes its questions from an index list; use it with "
                         "--protocol memagent (ReMemR1 draws them: --max-samples)")
    if follows and protocol != "rememr1":
        raise ValueError("--follows: only ReMemR1's script runs several datasets on one RNG; use --protocol rememr1")
    name = dataset_name(dataset)
    if protocol == "memagent":
        eval_t, train_t = ma.memagent_templates(memagent_repo)
    else:
        eval_t, train_t = rr.rememr1_template(rememr1_repo), ""
    source = str(input_path)
    questions, pool = _load(Path(input_path), pool_files, protocol)
    plan = PaperPlan(protocol, questions, pool, Path(out), load_token_counter(tokenizer), seed, eval_t, train_t)
    plan.notices += _empty_golds(questions)
    if pool_files:
        plan.notices.append(f"--pool: the paper's pool is the input's own paragraphs; these {len(pool):,} include "
                            "others, so every sample's documents differ from what its script draws from")
    if indices is not None:  # the script's eval_200.json list: those questions, in that order
        questions[:] = [questions[i] for i in _read_indices(Path(indices), len(questions))]
    if protocol == "memagent" and max_samples is not None:
        del questions[max_samples:]  # the script's indices 0..K-1; every paragraph stays in the pool
    for n in sizes:
        check_own_fits(questions, n, len(pool), source)
        if n >= len(pool):
            plan.notices.append(f"--docs {n}: the pool has {len(pool):,} paragraphs; as in the paper's script, "
                                f"each sample holds all of them (num_docs still says {n})")
    if protocol == "rememr1":
        # only how many questions each earlier input holds matters (its picks are replayed): no pool is built
        earlier = [sum(map(rr.usable, read_multihop(Path(f), strict_facts=False))) for f in follows]
        _plan_rememr1(plan, sizes, name, max_samples, min_distance, source, earlier)
        return plan
    plan.eval_sizes = sizes
    plan.eval_names = {n: eval_file_name(n, "json", dataset=name if rememr1_names else None) for n in sizes}
    if train_tokens:
        plan.train_name = train_file_name(train_tokens)
        plan.notices.append(f"--train-tokens does not apply under --protocol memagent: MemAgent's training file has "
                            f"exactly {ma.TRAIN_DOCS} documents per question (written to {plan.train_name})")
        if len(questions) > ma.TRAIN_QUESTIONS:
            plan.notices.append(f"the training file holds the first {ma.TRAIN_QUESTIONS:,} of the {len(questions):,} "
                                "questions, as processing.py's generate_dataset(80000, ...)")
    return plan


def _plan_rememr1(plan: PaperPlan, sizes: list[int], name: str, n_subset: int | None, min_distance: int | None,
                  source: str, follows: list[int]) -> None:
    """Draw every sample and decide the files: the plain file per N and the non-empty distance variants."""
    for count in [*follows, len(plan.questions)]:
        rr.check_subset(count, n_subset)
    drawn = rr.draw_layouts(plan.questions, plan.pool, sizes, seed=plan.seed, n_subset=n_subset, source=source,
                            follows=follows)
    distances = rr.VARIANT_DISTANCES if min_distance is None else (min_distance,)
    for n in sizes:
        plan.rememr1_files[eval_file_name(n, "json", dataset=name)] = rr.variant(drawn[n], None, n_subset)
        counts = []
        for d in distances:
            kept = rr.variant(drawn[n], d, n_subset)
            if kept:
                plan.rememr1_files[eval_file_name(n, "json", dataset=name, min_distance=d)] = kept
            counts.append(f"{d}: {len(kept)}")
        plan.notices.append(f"N={n}: samples per min_distance variant (reverse-ordered, gap >= D) "
                            f"{', '.join(counts)}; a variant with none gets no file, as in ReMemR1's script")
