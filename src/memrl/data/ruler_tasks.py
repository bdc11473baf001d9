"""RULER's multi-hop tracing and aggregation tasks: variable tracking, CWE, FWE.

* ``vt`` (variable tracking): one chain ``VAR A = 12345``, ``VAR B = VAR A``, ... with
  four hops (five variables) spread in order through a repeated filler passage; the
  question gives the number and the answer is all five variable names.
* ``cwe`` (common words extraction): a numbered list in which ten words appear 30
  times each and every other word 3 times (6 and 1 below 4K-token targets, as in
  RULER); the answer is the ten frequent words.
* ``fwe`` (frequent words extraction): random six-letter "coded" words whose counts
  follow a Zipf law (alpha 2); the most frequent "word" is the noise token ``...``,
  so the answer is the words ranked 2-4. The vocabulary holds target_length // 50 words.

RULER's prompts for vt and cwe also carry one worked example; memrl's questions do not
(the agent sees the question beside every chunk, and the example would be read as part
of the task text, not of the document).
"""

from __future__ import annotations

import math
import random
import string

from memrl.data.ruler_base import Builder, RulerItem, RulerSources
from memrl.data.ruler_text import ADJECTIVES, NOUNS, REPEATED_PASSAGE, VERBS, coded_words, pseudo_words

VT_HOPS = 4
VT_CHAINS = 1


def _var_names(rng: random.Random, count: int) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < count:
        name = "".join(rng.choices(string.ascii_uppercase, k=5))
        if name not in seen:
            seen.add(name)
            out.append(name)
    return out


def vt_builder(length: int, sources: RulerSources, hops: int = VT_HOPS, chains: int = VT_CHAINS) -> Builder:
    """``size`` filler passages with ``chains`` assignment chains of ``hops`` hops inserted in order."""

    def build(rng: random.Random, size: int, index: int) -> RulerItem:
        names = _var_names(rng, chains * (hops + 1))
        starts: list[str] = []
        statements: list[list[str]] = []
        for c in range(chains):
            chain = names[c * (hops + 1):(c + 1) * (hops + 1)]
            value = str(rng.randint(10000, 99999))
            while value in starts:
                value = str(rng.randint(10000, 99999))
            starts.append(value)
            statements.append([f"VAR {chain[0]} = {value}."]
                              + [f"VAR {chain[j + 1]} = VAR {chain[j]}." for j in range(hops)])
        units = [REPEATED_PASSAGE] * size
        for chain_statements in statements:
            gaps = sorted(rng.sample(range(len(units) + 1), len(chain_statements)))
            for offset, (gap, stmt) in enumerate(zip(gaps, chain_statements)):
                units.insert(gap + offset, stmt)
        question = (f"Which variables are assigned the value {starts[0]}, either directly or through "
                    "another variable? Follow every assignment in the text and list all of them.")
        return RulerItem(context="\n".join(units), question=question, answers=names[:hops + 1],
                         meta={"value": starts[0], "hops": hops, "chains": chains})

    return build


CWE_COMMON = 10


def cwe_repeats(length: int) -> tuple[int, int]:
    """(repeats of each common word, repeats of each other word): RULER's 30/3, or 6/1 below 4K tokens."""
    return (6, 1) if length < 4096 else (30, 3)


_REAL_WORDS = tuple(dict.fromkeys(ADJECTIVES + NOUNS + VERBS))


def cwe_builder(length: int, sources: RulerSources) -> Builder:
    """A numbered list of ``size`` distinct words; ten of them repeated far more than the rest."""
    common_rep, other_rep = cwe_repeats(length)

    def build(rng: random.Random, size: int, index: int) -> RulerItem:
        size = max(size, CWE_COMMON + 1)
        vocab = list(_REAL_WORDS)
        if size > len(vocab):  # real words run out around 600: pronounceable non-words after that
            vocab += pseudo_words(rng, size - len(vocab), avoid=set(vocab))
        words = rng.sample(vocab, size)
        common, other = words[:CWE_COMMON], words[CWE_COMMON:]
        entries = common * common_rep + other * other_rep
        rng.shuffle(entries)
        context = " ".join(f"{i}. {w}" for i, w in enumerate(entries, start=1))
        question = (f"Which {CWE_COMMON} words occur most often in the numbered list above? "
                    f"Give all {CWE_COMMON} of them.")
        return RulerItem(context=context, question=question, answers=common,
                         meta={"distinct_words": size, "repeats": [common_rep, other_rep]})

    return build


FWE_ALPHA = 2.0


def zeta(alpha: float, terms: int = 10_000) -> float:
    """Riemann zeta for alpha > 1: a partial sum plus the Euler-Maclaurin tail (error < 1e-12 at alpha 2)."""
    if alpha <= 1:
        raise ValueError(f"zeta needs alpha > 1, got {alpha}")
    partial = math.fsum(k ** -alpha for k in range(1, terms))
    n = float(terms)
    return partial + n ** (1 - alpha) / (alpha - 1) + 0.5 * n**-alpha + alpha * n ** (-alpha - 1) / 12


def zipf_counts(total: int, vocab_size: int, alpha: float = FWE_ALPHA) -> list[int]:
    """How often each rank appears among ``total`` draws (rounded down, as RULER does)."""
    z = zeta(alpha)
    return [int(total * k**-alpha / z) for k in range(1, vocab_size + 1)]


def fwe_builder(length: int, sources: RulerSources, alpha: float = FWE_ALPHA) -> Builder:
    """``size`` Zipf-distributed coded words; rank 1 is the noise token ``...``."""
    vocab_size = max(length // 50, 10)

    def build(rng: random.Random, size: int, index: int) -> RulerItem:
        vocab = coded_words(rng, vocab_size)
        vocab[0] = "..."
        words = [w for w, n in zip(vocab, zipf_counts(size, vocab_size, alpha)) for _ in range(n)]
        rng.shuffle(words)
        question = ("Ignore the dots '....'. Which three coded words appear most often in the coded text "
                    "above? Give the three words only.")
        return RulerItem(context=" ".join(words), question=question, answers=vocab[1:4],
                         meta={"words": len(words), "vocab": vocab_size, "alpha": alpha})

    return build
