"""RULER's needle-in-a-haystack generator (``niah.py``), replayed draw for draw.

Both flavours share the sample: keys and values drawn from the global ``random`` (7-digit
numbers, adjective-noun pairs of wonderwords, version-4 UUIDs from 128 random bits), the
needles shuffled by a fresh ``Random(seed)`` (so every sample of a run has the same needle
order), then the haystack: the noise sentence repeated (``noise``/``repeat``), distractor
needles (``needle``), or the essay's first words (``essay``) with the needles at depths drawn
from 40 evenly spaced percentages. They differ in the size search and the record:

* RULER HEAD binary-searches the haystack size once (probes draw too), embeds the context in
  the template, cuts the answer prefix off the input and stores the answer's character offset
  in ``index`` (its variable is reused) and the prefix's token position.
* MemAgent grows the size by a fixed step until the probe is too long (context counted twice in
  the probe, as its script does), keeps the context out of ``input``, and repeats no essay text.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

from memrl.data.ruler_paper_run import PaperRecord, PaperRun, binary_search, retry_shrinking
from memrl.data.ruler_paper_text import key_words, read_essay_words, sentence_splitter, ESSAY_HINT

# RULER's needle depths: 40 evenly spaced percentages, rounded.
DEPTHS = [int(d) for d in np.round(np.linspace(0, 100, num=40, endpoint=True)).astype(int)]


class NiahRun:
    """One niah task at one length, with the haystack it reads."""

    def __init__(self, run: PaperRun) -> None:
        self.run = run
        a = run.args
        self.k_type, self.v_type = str(a.get("type_needle_k", "words")), str(a.get("type_needle_v", "numbers"))
        self.num_v, self.num_q = int(a.get("num_needle_v", 1)), int(a.get("num_needle_q", 1))
        self.num_k = max(int(a.get("num_needle_k", 1)), self.num_q)
        self.kind = str(a.get("type_haystack", "essay"))
        self.words: Sequence[str] = key_words() if "words" in (self.k_type, self.v_type) else ()
        self.essay: list[str] = []
        if self.kind == "essay":
            if run.inputs.essay is None:
                raise ValueError(f"--essay: task {run.task} needs Paul Graham's essays; pass {ESSAY_HINT}")
            self.essay = read_essay_words(run.inputs.essay)
            self.split = sentence_splitter()[0]
        elif self.kind not in (run.text.flavour.noise, "needle"):
            raise ValueError(f"{run.task}: haystack type {self.kind!r} is not one memrl reproduces")

    def value(self, kind: str) -> str:
        rng = self.run.py
        if kind == "numbers":
            return str(rng.randint(10 ** 6, 10 ** 7 - 1))
        if kind == "words":
            return rng.choice(self.words)
        if kind == "uuids":
            return str(uuid.UUID(int=rng.getrandbits(128), version=4))
        raise ValueError(f"{self.run.task}: needle type {kind!r} is not one of numbers, words, uuids")

    def _essay_context(self, size: int, needles: list[str]) -> str:
        hay = self.essay
        if self.run.flavour == "ruler" and size > len(hay):  # HEAD repeats the essay; MemAgent does not
            hay = hay * ((size + len(hay) - 1) // len(hay))
        sents = self.split(" ".join(hay[:size]).strip())
        depths = self.run.py.sample(DEPTHS, len(needles))
        cuts = [0] + sorted(int(len(sents) * (d / 100)) for d in depths) + [len(sents)]
        parts: list[str] = []
        for i in range(1, len(cuts)):
            parts.append(" ".join(sents[cuts[i - 1]:cuts[i]]))
            if i - 1 < len(needles):
                parts.append(needles[i - 1])
        return " ".join(parts)

    def _line_context(self, size: int, needles: list[str]) -> str:
        if self.kind == "needle":
            lines = [self.run.text.needle.format(type_needle_v=self.v_type, key=self.value(self.k_type),
                                                 value=self.value(self.v_type)) for _ in range(size)]
        else:
            lines = [self.run.text.niah_noise] * size
        for at, needle in zip(sorted(self.run.py.sample(range(size), len(needles)), reverse=True), needles):
            lines.insert(at, needle)
        return "\n".join(lines)

    def generate(self, size: int) -> dict[str, Any]:
        """One sample with ``size`` haystack units: input, context, answer prefix, answers, queried keys."""
        keys, values, needles = [], [], []
        for _ in range(self.num_k):
            keys.append(self.value(self.k_type))
            vals = []
            for _ in range(self.num_v):
                vals.append(self.value(self.v_type))
                needles.append(self.run.text.needle.format(type_needle_v=self.v_type, key=keys[-1], value=vals[-1]))
            values.append(vals)
        self.run.fixed().shuffle(needles)
        context = (self._essay_context if self.kind == "essay" else self._line_context)(size, needles)
        picked = self.run.py.sample(range(self.num_k), self.num_q)
        queries = [keys[i] for i in picked]
        answers = [a for i in picked for a in values[i]]
        query = ", ".join(queries[:-1]) + ", and " + queries[-1] if len(queries) > 1 else queries[0]
        template, v_type = self.run.template, self.v_type
        if self.num_q * self.num_v == 1:
            for old, new in (("Some", "A"), ("are all", "is"), ("are", "is"), ("answers", "answer")):
                template = template.replace(old, new)
            v_type = v_type[:-1]
        if self.run.flavour == "ruler":
            text = template.format(type_needle_v=v_type, context=context, query=query)
            prefix = ""
        else:
            text = template.format(type_needle_v=v_type, query=query)
            prefix = self.run.answer_prefix.format(type_needle_v=v_type, query=query)
        return {"input": text, "context": context, "answer_prefix": prefix, "outputs": answers, "keys": queries}

    def incremental(self) -> int:
        step = 500 if self.kind == "essay" else 25
        return 5 if self.kind != "essay" and self.run.length < 4096 else step


def _head_size(nr: NiahRun, inc: int) -> int:
    run, ttg = nr.run, nr.run.tokens_to_generate
    per_unit = run.count(nr.generate(inc)["input"]) / inc
    upper = max(int((run.length / per_unit) * 3), inc * 2)
    return binary_search(run, lambda n: run.count(nr.generate(n)["input"]) + ttg, inc, upper, run.length)


def _memagent_size(nr: NiahRun, inc: int) -> int:
    run, ttg = nr.run, nr.run.tokens_to_generate
    size, total = inc, 0
    while total + ttg < run.length:
        s = nr.generate(size)
        total = run.count(s["input"] + " ".join(s["outputs"]) + f" {s['context']}")
        if total + ttg > run.length:
            size -= inc
            break
        if nr.kind == "essay" and size > len(nr.essay):
            size = len(nr.essay)
            break
        size += inc
    return size


def niah_records(run: PaperRun, samples: int) -> list[PaperRecord]:
    """``samples`` records of a niah task, in the original's order and bytes."""
    nr = NiahRun(run)
    inc, ttg = nr.incremental(), run.tokens_to_generate
    size = (_head_size if run.flavour == "ruler" else _memagent_size)(nr, inc)
    out = []
    for index in range(samples):
        def make(n: int) -> tuple[dict[str, Any], int]:
            s = nr.generate(n)
            counted = s["input"] if run.flavour == "ruler" else s["input"] + s["context"]
            length = run.count(counted) + ttg
            if length > run.length:
                raise ValueError(f"{length} exceeds max_seq_length.")
            return s, length

        s, length = retry_shrinking(make, size, inc, run.task)
        if run.flavour == "ruler":
            text, prefix = run.cut_answer_prefix(s["input"])
            at = text.find(s["outputs"][0])
            rec = {"index": at, "input": text, "outputs": s["outputs"], "length": length,
                   "length_w_model_temp": length, "answer_prefix": prefix,
                   "token_position_answer": run.count(text[:at])}
            question = text.replace(s["context"], "", 1)
        else:
            rec = {"index": index, "input": s["input"], "context": s["context"], "outputs": s["outputs"],
                   "answer_prefix": s["answer_prefix"], "length": length}
            question = s["input"]
        out.append(PaperRecord(rec, s["context"], question))
    return out
