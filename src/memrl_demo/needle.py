"""A synthetic long-context task: find the one "secret code" hidden in filler text.

Each document is filler sentences with one needle sentence ("The secret code
is tiger.") at a random position; the question asks for the code. Every word
is a single token of the demo tokenizer, so the task is about *memory* (keep
the code across chunks that do not mention it), not spelling.
"""

from __future__ import annotations

import random

from memrl.data.longctx import LongContextSample

FILLER = ("the a of and to in is was on for with as by at from that this it he she they we you "
          "river stone field cloud market garden window letter road morning evening winter summer "
          "old new small large quiet busy green grey warm cold slowly often never always walked "
          "talked waited opened closed carried painted watched found kept city village house "
          "table chair lamp door bridge tower train ship bird horse dog cat tree flower").split()
# Four codes: a tiny model learns to spot each one quickly, so the demo's time goes into what it is
# about, keeping the code in memory across chunks that never mention it.
CODES = ["tiger", "apple", "violet", "copper"]
QUESTION = "What is the secret code?"


def needle_sentence(code: str) -> str:
    return f"The secret code is {code}."


def make_sample(rng: random.Random, index: int, sentences: int) -> LongContextSample:
    code = rng.choice(CODES)
    body = []
    for _ in range(sentences):
        words = [rng.choice(FILLER) for _ in range(rng.randint(6, 10))]
        body.append(" ".join(words).capitalize() + ".")
    body.insert(rng.randint(0, len(body)), needle_sentence(code))
    return LongContextSample(index=index, question=QUESTION, answers=[code], context=" ".join(body),
                             num_docs=1, id=f"needle-{index}")


def make_split(seed: int, count: int, sentences: tuple[int, int]) -> list[LongContextSample]:
    rng = random.Random(seed)
    return [make_sample(rng, i, rng.randint(*sentences)) for i in range(count)]


def tokenizer_corpus() -> list[str]:
    """Text covering every word, so each becomes one token (with and without a leading space)."""
    rng = random.Random(0)
    words = FILLER + CODES + ["secret", "code", "none", "The", "What"]
    lines = [" ".join(rng.sample(words, len(words))) for _ in range(40)]
    lines += [needle_sentence(c) + " \\boxed{ " + c + "}" for c in CODES for _ in range(5)]
    return lines
