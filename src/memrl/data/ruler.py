"""The RULER synthetic suite (Hsieh et al., 2024) in memrl's long-context layout.

MemAgent's second table tests the RL-trained agent out of distribution on RULER:
the eight needle-in-a-haystack variants, variable tracking, frequent-word
extraction and SQuAD QA, at 8K-512K tokens, 128 samples each. This module
builds those tasks (plus ``cwe`` and HotpotQA ``qa_2``, RULER's other two) for
any tokenizer and writes ``ruler_{task}_{length}.jsonl`` files that ``memrl
eval`` and :mod:`memrl.eval.ruler_suite` read.

Length. A sample is filled to its target with the given tokenizer: context +
question + the task's answer room (RULER's ``tokens_to_generate``) stay at or
under the target. The haystack size (sentences, passages, list entries, words or
documents) is searched per sample: first a bracket by proportional guesses, then
bisection, starting from the size the previous sample ended with, so a long file
costs about one or two tokenizations per sample. Token counts of context and
question are stored in the record (``tokens``).

Determinism. Sample ``i`` of ``task`` at ``length`` uses its own RNG seeded by
``(seed, task, length, i)``: files are reproducible, and a sample does not depend
on how many others are generated.

Records are the eval schema of :mod:`memrl.data.longctx` with ``task``, ``length``,
``tokens`` and ``metric`` (``string_match_all`` or ``string_match_part``) added.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from pathlib import Path

from memrl.data.longctx import LongContextSample, SampleWriter
from memrl.data.ruler_base import Builder, RulerItem, RulerSources, TaskSpec
from memrl.data.ruler_niah import NIAH_TASKS, niah_builder, min_units
from memrl.data.ruler_qa import doc_count, qa_builder
from memrl.data.ruler_tasks import VT_CHAINS, VT_HOPS, cwe_builder, fwe_builder, vt_builder
from memrl.data.synth import parse_token_budget
from memrl.data.tokens import TokenCounter

# RULER's tokens_to_generate per family: room left for the answer inside the target length.
_ANSWER_TOKENS = {"niah": 128, "variable_tracking": 30, "common_words_extraction": 120,
                  "freq_words_extraction": 50, "qa": 32}


def _registry() -> dict[str, TaskSpec]:
    tasks: dict[str, TaskSpec] = {}
    for name, cfg in NIAH_TASKS.items():
        tasks[name] = TaskSpec(
            name, "niah", "string_match_all", _ANSWER_TOKENS["niah"],
            make=lambda length, sources, cfg=cfg: niah_builder(cfg, sources), min_size=min_units(cfg),
            description=f"haystack={cfg.haystack} key={cfg.key_type} value={cfg.value_type} "
                        f"keys={max(cfg.keys, cfg.queries)} values={cfg.values} queries={cfg.queries}")
    tasks["vt"] = TaskSpec("vt", "variable_tracking", "string_match_all", _ANSWER_TOKENS["variable_tracking"],
                           make=vt_builder, min_size=VT_CHAINS * (VT_HOPS + 1) - 1,
                           description="1 chain, 4 hops")
    tasks["cwe"] = TaskSpec("cwe", "common_words_extraction", "string_match_all",
                            _ANSWER_TOKENS["common_words_extraction"], make=cwe_builder, min_size=11,
                            description="10 common words x30, others x3 (x6/x1 below 4K)")
    tasks["fwe"] = TaskSpec("fwe", "freq_words_extraction", "string_match_all",
                            _ANSWER_TOKENS["freq_words_extraction"], make=fwe_builder, min_size=100,
                            description="Zipf alpha 2, top 3 after the noise word")
    tasks["qa_1"] = TaskSpec("qa_1", "qa", "string_match_part", _ANSWER_TOKENS["qa"],
                             make=lambda length, sources: qa_builder("squad", sources), min_size=1,
                             max_size=lambda sources: doc_count("squad", sources), description="SQuAD (--squad)")
    tasks["qa_2"] = TaskSpec("qa_2", "qa", "string_match_part", _ANSWER_TOKENS["qa"],
                             make=lambda length, sources: qa_builder("hotpotqa", sources), min_size=1,
                             max_size=lambda sources: doc_count("hotpotqa", sources),
                             description="HotpotQA (--hotpotqa)")
    return tasks


TASKS: dict[str, TaskSpec] = _registry()
# MemAgent's RULER table: 8 NIAH variants, variable tracking, FWE and SQuAD QA.
MEMAGENT_TASKS = (*NIAH_TASKS, "vt", "fwe", "qa_1")
DEFAULT_LENGTHS = (8192, 16384, 32768, 65536, 131072, 262144, 524288)
FILE_PATTERN = re.compile(r"^ruler_(?P<task>.+)_(?P<length>\d+)\.jsonl$")


def file_name(task: str, length: int) -> str:
    return f"ruler_{task}_{length}.jsonl"


def parse_file_name(name: str) -> tuple[str, int] | None:
    """``ruler_niah_single_1_8192.jsonl`` -> ("niah_single_1", 8192); ``None`` for other names."""
    m = FILE_PATTERN.match(name)
    return (m["task"], int(m["length"])) if m else None


def parse_lengths(text: str) -> list[int]:
    """``8k,16k`` -> [8192, 16384] (k = 1024, as RULER's and MemAgent's lengths)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise ValueError("--lengths: give at least one length, e.g. --lengths 8k,16k")
    try:
        return [parse_token_budget(p) for p in parts]
    except ValueError as exc:
        raise ValueError(f"--lengths: {exc}") from None


def parse_tasks(text: str) -> list[str]:
    """Comma-separated task names; ``memagent`` expands to MemAgent's table, ``all`` to every task."""
    out: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        names = MEMAGENT_TASKS if part == "memagent" else tuple(TASKS) if part == "all" else (part,)
        for name in names:
            if name not in TASKS:
                raise ValueError(f"--tasks: unknown task {name!r}; choose from {', '.join(TASKS)} "
                                 "(or memagent, all)")
            if name not in out:
                out.append(name)
    if not out:
        raise ValueError("--tasks: give at least one task")
    return out


class LengthError(ValueError):
    """A target length the task cannot reach (too short for its fixed parts, or a too-small pool)."""


@dataclass
class FitResult:
    item: RulerItem
    tokens: int
    size: int


@dataclass
class Filler:
    """Fills samples of one task to one target length, carrying the last size forward."""

    spec: TaskSpec
    length: int
    counter: TokenCounter
    build: Builder
    seed: int
    max_size: int | None = None
    slack: float = 0.01
    last_size: int | None = None
    probes: int = field(default=0, init=False)

    @property
    def budget(self) -> int:
        return self.length - self.spec.answer_tokens

    def _rng(self, index: int) -> random.Random:
        return random.Random(f"{self.seed}/{self.spec.name}/{self.length}/{index}")

    def _try(self, size: int, index: int) -> FitResult:
        item = self.build(self._rng(index), size, index)
        self.probes += 1
        return FitResult(item, self.counter.count(item.context) + self.counter.count(item.question), size)

    def sample(self, index: int) -> FitResult:
        """The largest haystack for sample ``index`` that fits (to within ``slack`` of the budget)."""
        low, cap = self.spec.min_size, self.max_size
        size = max(low, min(self.last_size or low, cap or 1 << 62))
        best: FitResult | None = None  # largest size that fits
        fail: int | None = None  # smallest size that overflows
        res = self._try(size, index)
        for _ in range(60):
            if res.tokens <= self.budget:
                best = res
                if res.tokens >= self.budget * (1 - self.slack) or (cap is not None and size >= cap):
                    break
            else:
                fail = size
            guess = int(size * self.budget / max(res.tokens, 1))  # tokens grow about linearly with size
            if fail is None:  # everything fitted so far: grow
                guess = max(guess, size + 1)
                if cap is not None:
                    guess = min(guess, cap)
            elif best is None:  # everything overflowed so far: shrink
                if size <= low:
                    break
                guess = max(low, min(guess, size - 1))
            else:
                if fail - best.size <= 1:
                    break
                if not best.size < guess < fail:
                    guess = (best.size + fail) // 2
            size = guess
            res = self._try(size, index)
        if best is None:
            raise LengthError(f"{self.spec.name}: a {self.length}-token target leaves {self.budget} tokens after "
                              f"the answer room, less than the smallest sample ({res.tokens} tokens); "
                              "choose a longer --lengths value")
        if cap is not None and best.size >= cap and best.tokens < self.budget * 0.9:
            raise LengthError(f"{self.spec.name}: all {cap} documents give only {best.tokens} tokens, short of "
                              f"the {self.length}-token target; add paragraphs with --pool FILE or use shorter "
                              "--lengths")
        self.last_size = best.size
        return best


def make_filler(task: str, length: int, counter: TokenCounter, sources: RulerSources, seed: int) -> Filler:
    spec = TASKS[task]
    return Filler(spec, length, counter, spec.make(length, sources), seed, max_size=spec.max_size(sources))


def generate(task: str, length: int, counter: TokenCounter, *, samples: int = 128, seed: int = 42,
             sources: RulerSources | None = None) -> Iterator[LongContextSample]:
    """Yield ``samples`` samples of ``task`` filled to ``length`` tokens of ``counter``."""
    sources = sources or RulerSources()
    filler = make_filler(task, length, counter, sources, seed)
    spec = filler.spec
    if spec.family == "qa":
        from memrl.data.ruler_qa import question_count

        samples = min(samples, question_count("squad" if task == "qa_1" else "hotpotqa", sources))
    for i in range(samples):
        res = filler.sample(i)
        item = res.item
        yield LongContextSample(
            index=i, question=item.question, answers=list(item.answers), context=item.context,
            num_docs=item.num_docs, id=f"{task}-{length}-{i}", gold_docs=list(item.gold_docs),
            extra={"task": task, "length": length, "tokens": res.tokens, "metric": spec.metric,
                   "answer_tokens": spec.answer_tokens, "haystack_units": res.size, **item.meta},
        )


@dataclass
class RulerFileReport:
    path: str
    task: str
    length: int
    samples: int
    tokens_min: int
    tokens_mean: float
    tokens_max: int
    tokenizer: str

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def write_task_file(out: Path, task: str, length: int, counter: TokenCounter, *, samples: int, seed: int,
                    sources: RulerSources, progress: Callable[[int], None] | None = None) -> RulerFileReport:
    """Write ``out/ruler_{task}_{length}.jsonl`` atomically; returns its token report."""
    return write_samples_file(out, task, length, counter,
                              generate(task, length, counter, samples=samples, seed=seed, sources=sources), progress)


def write_samples_file(out: Path, task: str, length: int, counter: TokenCounter, samples: Iterable[Any],
                       progress: Callable[[int], None] | None = None) -> RulerFileReport:
    """Write ``samples`` (each with ``extra["tokens"]``) to ``out/ruler_{task}_{length}.jsonl`` atomically, any
    protocol's generator; returns the file's token report."""
    path = out / file_name(task, length)
    counts: list[int] = []
    with SampleWriter(path, fmt="jsonl") as writer:
        for sample in samples:
            writer.write(sample)
            counts.append(int(sample.extra["tokens"]))
            if progress:
                progress(1)
    return RulerFileReport(str(path), task, length, len(counts), min(counts, default=0),
                           round(sum(counts) / len(counts), 1) if counts else 0.0, max(counts, default=0),
                           counter.name)
