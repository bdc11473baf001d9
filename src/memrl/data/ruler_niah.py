"""RULER's eight needle-in-a-haystack variants.

A needle is one sentence binding a key to a value ("The special magic number for
quiet-harbor is: 4821937."). Variants differ in the haystack (a repeated passage,
essay-like prose, or other needles with the same shape), in the key and value types
(``words`` = adjective-noun, ``numbers`` = 7 digits, ``uuids``) and in the counts:

============== ========= ====== ======= ====== ====== =======
task           haystack  key    value   keys   values queries
============== ========= ====== ======= ====== ====== =======
niah_single_1  repeat    words  numbers 1      1      1
niah_single_2  essay     words  numbers 1      1      1
niah_single_3  essay     words  uuids   1      1      1
niah_multikey_1 essay    words  numbers 4      1      1
niah_multikey_2 needle   words  numbers 1      1      1
niah_multikey_3 needle   uuids  uuids   1      1      1
niah_multivalue essay    words  numbers 1      4      1
niah_multiquery essay    words  numbers 4      1      4
============== ========= ====== ======= ====== ====== =======

(as RULER's ``synthetic.yaml``; keys = max(keys, queries), so multiquery plants four
keys and asks for all four). The answers are every value of every queried key.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from memrl.data.ruler_base import Builder, RulerItem, RulerSources
from memrl.data.ruler_text import REPEATED_PASSAGE, EssaySource, distinct, random_value

_SINGULAR = {"numbers": "number", "words": "word", "uuids": "uuid"}


@dataclass(frozen=True)
class NiahConfig:
    haystack: str  # repeat | essay | needle
    key_type: str
    value_type: str
    keys: int = 1
    values: int = 1
    queries: int = 1


NIAH_TASKS: dict[str, NiahConfig] = {
    "niah_single_1": NiahConfig("repeat", "words", "numbers"),
    "niah_single_2": NiahConfig("essay", "words", "numbers"),
    "niah_single_3": NiahConfig("essay", "words", "uuids"),
    "niah_multikey_1": NiahConfig("essay", "words", "numbers", keys=4),
    "niah_multikey_2": NiahConfig("needle", "words", "numbers"),
    "niah_multikey_3": NiahConfig("needle", "uuids", "uuids"),
    "niah_multivalue": NiahConfig("essay", "words", "numbers", values=4),
    "niah_multiquery": NiahConfig("essay", "words", "numbers", keys=4, queries=4),
}


def needle_sentence(value_type: str, key: str, value: str) -> str:
    """The sentence that plants one (key, value) pair."""
    return f"The special magic {_SINGULAR[value_type]} for {key} is: {value}."


def _join_keys(keys: list[str]) -> str:
    if len(keys) == 1:
        return keys[0]
    return ", ".join(keys[:-1]) + ", and " + keys[-1]


def niah_question(cfg: NiahConfig, queried: list[str]) -> str:
    kind = cfg.value_type
    if cfg.values * cfg.queries == 1:
        return f"What is the special magic {_SINGULAR[kind]} for {queried[0]} given in the text?"
    return (f"What are all the special magic {kind} for {_join_keys(queried)} given in the text? "
            f"List every one of them.")


def _haystack(cfg: NiahConfig, rng: random.Random, size: int, keys: set[str], essay: EssaySource) -> list[str]:
    if cfg.haystack == "repeat":
        return [REPEATED_PASSAGE] * size
    if cfg.haystack == "essay":
        return essay.take(rng, size)
    # "needle": distractor needles of the same shape; their keys never equal a planted key
    fillers = []
    for _ in range(size):
        key = random_value(rng, cfg.key_type)
        while key in keys:
            key = random_value(rng, cfg.key_type)
        fillers.append(needle_sentence(cfg.value_type, key, random_value(rng, cfg.value_type)))
    return fillers


def niah_builder(cfg: NiahConfig, sources: RulerSources) -> Builder:
    """A builder of samples with ``size`` haystack units and the needles placed at random gaps."""
    num_keys = max(cfg.keys, cfg.queries)

    def build(rng: random.Random, size: int, index: int) -> RulerItem:
        keys = distinct(rng, cfg.key_type, num_keys)
        pool = distinct(rng, cfg.value_type, num_keys * cfg.values, avoid=set(keys))
        values = [pool[i * cfg.values:(i + 1) * cfg.values] for i in range(num_keys)]
        needles = [needle_sentence(cfg.value_type, k, v) for k, vs in zip(keys, values) for v in vs]
        rng.shuffle(needles)
        units = _haystack(cfg, rng, size, set(keys), sources.essay)
        # distinct gaps among the size + 1 between (and around) units, in order
        gaps = sorted(rng.sample(range(len(units) + 1), len(needles)))
        for offset, (gap, needle) in enumerate(zip(gaps, needles)):
            units.insert(gap + offset, needle)
        queried_idx = rng.sample(range(num_keys), cfg.queries)
        queried = [keys[i] for i in queried_idx]
        answers = [v for i in queried_idx for v in values[i]]
        sep = " " if cfg.haystack == "essay" else "\n"
        return RulerItem(context=sep.join(units), question=niah_question(cfg, queried), answers=answers,
                         meta={"keys": queried, "needles": len(needles)})

    return build


def min_units(cfg: NiahConfig) -> int:
    """Fewest haystack units: enough gaps for every needle to land in a different one."""
    return max(1, max(cfg.keys, cfg.queries) * cfg.values - 1)
