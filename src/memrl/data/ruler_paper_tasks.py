"""RULER's variable tracking (vt), common words (cwe) and frequent words (fwe), replayed draw for draw.

* vt: chains ``VAR ABCDE = 12345`` / ``VAR FGHIJ = VAR ABCDE `` (the trailing space and the
  missing period are the original's) inserted in order among repeated noise sentences; the value
  comes from NumPy's global generator. RULER HEAD first generates one few-shot example (3-letter
  names, value 12345, a 500-token budget) and puts it, with fresh names and value, before every
  input; MemAgent's copy has no example and sizes by fixed steps.
* cwe: words from wonderwords' three lists (shuffled once by ``Random(seed)``), ten of them
  repeated ``freq_cw`` times and the rest ``freq_ucw`` times, in a numbered list; RULER HEAD adds
  one few-shot list, and beyond wonderwords' size draws from ``english_words.json``.
* fwe: 6-letter coded words with Zipf counts (``scipy.special.zeta``; alpha 2 gives pi^2/6); the
  vocabulary has (L-50)//50 words in RULER HEAD (the answer room is subtracted first) and L//50
  in MemAgent's copy.
"""

from __future__ import annotations

import math
import string
from typing import Any

import numpy as np

from memrl.data.ruler_paper_run import PaperRecord, PaperRun, binary_search, retry_shrinking
from memrl.data.ruler_paper_text import cwe_words, read_english_words

UPPER, LOWER = string.ascii_uppercase, string.ascii_lowercase


# --- vt -------------------------------------------------------------------------------------------

def _chains(run: PaperRun, num_chains: int, num_hops: int, icl: bool) -> tuple[list[list[str]], list[list[str]]]:
    k, hops = (3, min(10, num_hops)) if icl else (5, num_hops)
    names = ["".join(run.py.choices(UPPER, k=k)).upper() for _ in range((hops + 1) * num_chains)]
    while len(set(names)) < num_chains * (hops + 1):
        names.append("".join(run.py.choices(UPPER, k=k)).upper())
    all_vars, chains = [], []
    for i in range(0, len(names), hops + 1):
        these = names[i:i + hops + 1]
        all_vars.append(these)
        value = "12345" if icl and run.flavour == "ruler" else str(run.np.randint(10000, 99999))
        chain = [f"VAR {these[0]} = {value}"]
        for j in range(hops):
            chain.append(f"VAR {these[j + 1]} = VAR {these[j]} ")
        chains.append(chain)
    return all_vars, chains


def _vt_generate(run: PaperRun, noises: int, icl: bool) -> dict[str, Any]:
    a = run.args
    num_chains, num_hops = int(a.get("num_chains", 1)), int(a.get("num_hops", 4))
    names, chains = _chains(run, num_chains, num_hops, icl)
    value = chains[0][0].split("=")[-1].strip()
    lines = [run.text.vt_noise] * noises
    if run.flavour == "memagent" and len(lines) <= len(chains[0]):  # MemAgent splits the filler into sentences when it is too short
        lines = [n + "." if len(n.strip()) > 0 else n for n in (x for s in lines for x in s.split("."))]
        if len(lines) <= len(chains[0]):
            chains = [c[:len(lines) - 1] for c in chains]
    for chain in chains:
        for j, at in enumerate(sorted(run.py.sample(range(len(lines)), len(chain)))):
            lines.insert(at + j, chain[j])
    context = ("\n" if run.flavour == "ruler" else " ").join(lines).replace(". \n", ".\n")
    if run.flavour == "ruler":
        text, prefix = run.template.format(context=context, query=value, num_v=num_hops + 1), ""
    else:
        text = run.template.format(query=value, num_v=num_hops + 1)
        prefix = run.answer_prefix.format(query=value, num_v=num_hops + 1)
    return {"input": text, "context": context, "answer_prefix": prefix, "outputs": names[0]}


def _vt_head_pass(run: PaperRun, samples: int, length: int, icl_example: dict[str, Any] | None) -> list[PaperRecord]:
    """RULER HEAD's ``sys_vartrack_w_noise_random``: the few-shot pass (example None) or the real one."""
    icl = icl_example is None
    ttg = 0 if icl else run.tokens_to_generate
    inc = 5 if icl else (5 if run.length < 4096 else 10)
    example, example_tokens = "", 0
    if not icl:
        example = icl_example["input"] + " " + " ".join(icl_example["outputs"]) + "\n"
        example_tokens = run.count(example)
    per_unit = run.count(_vt_generate(run, inc, icl)["input"]) / inc
    upper = max(int((length / per_unit) * 3), inc * 2)
    size = binary_search(run, lambda n: run.count(_vt_generate(run, n, icl)["input"]) + example_tokens + ttg,
                         inc, upper, length)
    out = []
    for index in range(samples):
        def make(n: int) -> tuple[dict[str, Any], str, int]:
            s = _vt_generate(run, n, icl)
            text = s["input"]
            if not icl:  # the example goes between the model template and the task template
                cut = text.index(str(run.base["template"])[:20])
                text = text[:cut] + _randomize_icl(run, example) + "\n" + text[cut:]
            total = run.count(text) + ttg
            if total > length:
                raise ValueError(f"{total} exceeds max_seq_length.")
            return s, text, total

        s, text, total = retry_shrinking(make, size, inc, run.task)
        if icl:
            out.append(PaperRecord({"index": index, "input": text, "outputs": s["outputs"], "length": total},
                                   s["context"], text))
            continue
        text, prefix = run.cut_answer_prefix(text)
        rec = {"index": index, "input": text, "outputs": s["outputs"], "length": total,
               "length_w_model_temp": total, "answer_prefix": prefix}
        out.append(PaperRecord(rec, s["context"], text.replace(s["context"], "", 1)))
    return out


def _randomize_icl(run: PaperRun, example: str) -> str:
    """RULER HEAD: new random names for the example's answer names (plain text replace) and a new value."""
    for item in example.strip().split()[-int(run.args.get("num_hops", 4)) - 1:]:
        example = example.replace(item, "".join(run.py.choices(UPPER, k=len(item))).upper())
    return example.replace("12345", str(run.np.randint(10000, 99999)))


def _vt_memagent(run: PaperRun, samples: int) -> list[PaperRecord]:
    ttg, inc = run.tokens_to_generate, 10
    size, total = inc, 0
    while total + ttg < run.length:
        s = _vt_generate(run, size, False)
        total = run.count(s["input"] + f" {s['outputs']}" + s["context"])
        if total + ttg > run.length:
            size -= inc
            break
        size += inc
    out = []
    for index in range(samples):
        def make(n: int) -> tuple[dict[str, Any], int]:
            s = _vt_generate(run, n, False)
            length = run.count(s["input"] + s["context"]) + ttg
            if length > run.length:
                raise ValueError(f"{length} exceeds max_seq_length.")
            return s, length

        s, length = retry_shrinking(make, size, inc, run.task)
        rec = {"index": index, "input": s["input"], "context": s["context"], "outputs": s["outputs"],
               "answer_prefix": s["answer_prefix"], "length": length}
        out.append(PaperRecord(rec, s["context"], s["input"]))
    return out


def vt_records(run: PaperRun, samples: int) -> list[PaperRecord]:
    if str(run.args.get("type_haystack", "noise")) not in ("noise", "repeat"):
        raise ValueError(f"{run.task}: only vt's noise haystack is reproduced (synthetic.yaml asks for "
                         f"{run.args.get('type_haystack')!r})")
    if run.flavour == "memagent":
        return _vt_memagent(run, samples)
    example = _vt_head_pass(run, 1, 500, None)[0].original
    return _vt_head_pass(run, samples, run.length, example)


# --- cwe ------------------------------------------------------------------------------------------

class CweRun:
    def __init__(self, run: PaperRun) -> None:
        self.run = run
        self.words = cwe_words(run.seed)
        self._english: list[str] | None = None
        a = run.args
        self.freq_cw, self.freq_ucw, self.num_cw = int(a.get("freq_cw", 30)), int(a.get("freq_ucw", 3)), \
            int(a.get("num_cw", 10))

    def example(self, num_words: int, common_repeats: int, uncommon_repeats: int) -> tuple[str, list[str]]:
        if num_words <= len(self.words):
            full = self.run.py.sample(self.words, num_words)
        else:
            if self.run.flavour == "memagent":
                raise ValueError("Sample larger than population or is negative")
            if self._english is None:
                self._english = read_english_words(self.run.inputs.english_words)
            full = self.run.py.sample(self._english, num_words)
        common, uncommon = full[:self.num_cw], full[self.num_cw:]
        listed = common * common_repeats + uncommon * uncommon_repeats
        self.run.fixed().shuffle(listed)
        return " ".join(f"{i + 1}. {w}" for i, w in enumerate(listed)), common

    def generate(self, num_words: int) -> dict[str, Any]:
        run, small = self.run, self.run.length < 4096
        shots = []
        if run.flavour == "ruler":  # one few-shot example (num_fewshot 1)
            shots.append(self.example(20, 3, 1) if small else self.example(40, 10, 3))
        context, answer = self.example(num_words, 6, 1) if small else self.example(num_words, self.freq_cw,
                                                                                   self.freq_ucw)
        if run.flavour == "memagent":
            return {"input": run.template.format(query=""), "context": context, "outputs": answer}
        listed = [run.template.format(num_cw=self.num_cw, context=c, query="") + " "
                  + " ".join(f"{i + 1}. {w}" for i, w in enumerate(a)) for c, a in shots]
        text = "\n".join(listed) + "\n" + run.template.format(num_cw=self.num_cw, context=context, query="")
        return {"input": text, "context": context, "outputs": answer}


def _cwe_size(cw: CweRun) -> int:
    run, ttg, inc = cw.run, cw.run.tokens_to_generate, 10
    if run.flavour == "ruler":
        per_word = run.count(cw.generate(4096)["input"]) / 4096
        upper = max(int(run.length // per_word) * 2, inc * 2)
        return binary_search(run, lambda n: run.count(cw.generate(n)["input"]) + ttg, inc, upper, run.length)
    size, total = inc, 0
    while total + ttg < run.length:
        s = cw.generate(size)
        total = run.count(s["input"] + s["context"] + " "
                          + " ".join(f"{i + 1}. {w}" for i, w in enumerate(s["outputs"])))
        if total + ttg > run.length:
            size -= inc
            break
        size += inc
        if size > len(cw.words):
            size = len(cw.words)
            break
    return size


def cwe_records(run: PaperRun, samples: int) -> list[PaperRecord]:
    cw = CweRun(run)
    ttg, size = run.tokens_to_generate, _cwe_size(cw)
    out = []
    for index in range(samples):
        def make(n: int) -> tuple[dict[str, Any], int]:
            s = cw.generate(n)
            length = run.count(s["input"] if run.flavour == "ruler" else s["input"] + s["context"]) + ttg
            if length > run.length:
                raise ValueError(f"{length} exceeds max_seq_length.")
            return s, length

        s, length = retry_shrinking(make, size, 10, run.task)
        if run.flavour == "ruler":
            text, prefix = run.cut_answer_prefix(s["input"])
            rec = {"index": index, "input": text, "outputs": s["outputs"], "length": length,
                   "length_w_model_temp": length, "answer_prefix": prefix}
            out.append(PaperRecord(rec, s["context"], text.replace(s["context"], "", 1)))
        else:
            rec = {"index": index, "input": s["input"], "context": s["context"], "outputs": s["outputs"],
                   "answer_prefix": run.answer_prefix, "length": length}
            out.append(PaperRecord(rec, s["context"], s["input"]))
    return out


# --- fwe ------------------------------------------------------------------------------------------

def zeta(alpha: float) -> float:
    """``scipy.special.zeta(alpha)`` as the originals call it: scipy's own when installed, else pi^2/6 for alpha 2.

    scipy 1.17's ``zeta(2.0)`` is exactly ``math.pi ** 2 / 6``; other alphas without scipy use memrl's
    Euler-Maclaurin sum, which may differ in the last bit.
    """
    try:
        from scipy.special import zeta as scipy_zeta
    except ImportError:
        if alpha == 2.0:
            return math.pi ** 2 / 6
        from memrl.data.ruler_tasks import zeta as own_zeta

        return own_zeta(alpha)
    return float(scipy_zeta(alpha))


def fwe_vocab_size(flavour: str, length: int, tokens_to_generate: int) -> int:
    """(L - answer room) // 50 in RULER HEAD, L // 50 in MemAgent's copy."""
    return (length - tokens_to_generate) // 50 if flavour == "ruler" else length // 50


class FweRun:
    def __init__(self, run: PaperRun) -> None:
        self.run = run
        self.alpha = float(run.args.get("alpha", 2.0))
        self.wordlen = int(run.args.get("coded_wordlen", 6))
        self.budget = run.length - run.tokens_to_generate if run.flavour == "ruler" else run.length
        self.vocab_size = int(run.args.get("vocab_size", -1))
        if self.vocab_size == -1:
            self.vocab_size = fwe_vocab_size(run.flavour, run.length, run.tokens_to_generate)

    def generate(self, num_words: int = -1) -> tuple[str, str, list[str], int]:
        """(input, context, answer, number of words), as the original's ``generate_input_output``."""
        run, inc = self.run, self.budget // 32
        vocab = ["".join(run.py.choices(LOWER, k=self.wordlen)) for _ in range(self.vocab_size)]
        while len(set(vocab)) < self.vocab_size:
            vocab.append("".join(run.py.choices(LOWER, k=self.wordlen)))
        vocab = sorted(set(vocab))
        run.fixed().shuffle(vocab)
        vocab[0] = "..."
        z = zeta(self.alpha)

        def text(n: int) -> tuple[str, str]:
            counts = (n * (np.arange(1, len(vocab) + 1) ** -self.alpha) / z).astype(int)
            words = [w for w, c in zip(vocab, counts) for _ in range(c)]
            run.fixed().shuffle(words)
            ctx = " ".join(words)
            return (run.template.format(context=ctx, query="") if run.flavour == "ruler" else ctx), ctx

        if num_words > 0:
            full, ctx = text(num_words)
            while run.count(full) > self.budget:
                num_words -= inc
                full, ctx = text(num_words)
        else:
            num_words = self.budget // self.wordlen
            full, ctx = text(num_words)
            while run.count(full) < self.budget:
                num_words += inc
                full, ctx = text(num_words)
            num_words -= inc
        full, ctx = text(num_words)
        return full, ctx, vocab[1:4], num_words


def fwe_records(run: PaperRun, samples: int) -> list[PaperRecord]:
    fw = FweRun(run)
    size = fw.generate()[3]
    out = []
    for index in range(samples):
        full, ctx, answer, _ = fw.generate(size)
        length = run.count(full) + run.tokens_to_generate
        if run.flavour == "ruler":
            text, prefix = run.cut_answer_prefix(full)
            rec = {"index": index, "input": text, "outputs": answer, "length": length,
                   "length_w_model_temp": length, "answer_prefix": prefix}
            out.append(PaperRecord(rec, ctx, text.replace(ctx, "", 1)))
        else:
            rec = {"index": index, "input": run.template, "context": ctx, "outputs": answer,
                   "answer_prefix": run.answer_prefix, "length": length}
            out.append(PaperRecord(rec, ctx, run.template))
    return out
