"""The papers' RULER text, read at run time from the user's checkout of the original repository.

``memrl data ruler --protocol ruler`` reproduces NVIDIA RULER's generators (HEAD at c3f5e3b) and
``--protocol memagent`` MemAgent's copy of them (``taskutils/memory_data/synthetic`` at 76b7a65).
The algorithms (which random draws, in which order, how a haystack is sized) are memrl's code in
:mod:`memrl.data.ruler_paper`; the *sentences* (task templates, answer prefixes, the needle
sentence, the noise filler, the document header) are the authors' and stay in their repository:
memrl parses them out of ``constants.py``, ``synthetic.yaml`` and the generator ``.py`` files with
:mod:`ast`/YAML, never importing or running them. A missing checkout is one line saying where to
get it (``--ruler-repo`` / ``MEMRL_RULER_REPO``, ``--memagent-repo`` / ``MEMRL_MEMAGENT_REPO``).

Inputs that cannot ship are read from user paths too: Paul Graham's essays (RULER's
``PaulGrahamEssays.json``), RULER's ``english_words.json`` (a Git LFS object, used by cwe only
when a haystack needs more words than ``wonderwords`` has). The key and cwe vocabularies are the
``wonderwords`` package's lists, as the originals load them.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from memrl.data.originals import MEMAGENT, Original, OriginalMissing, checkout, read_string_constant

RULER = Original("RULER", "https://github.com/NVIDIA/RULER", "c3f5e3b4f87f97e048793bb510a3a6b19a46bf3a",
                 "--ruler-repo", "MEMRL_RULER_REPO")

ESSAY_HINT = ("RULER's PaulGrahamEssays.json: run scripts/data/synthetic/json/download_paulgraham_essay.py "
              "in a RULER checkout (it downloads the essays listed in PaulGrahamEssays_URLs.txt)")
ENGLISH_WORDS_HINT = ("RULER's scripts/data/synthetic/json/english_words.json (a Git LFS file: run "
                      "'git lfs pull' in a RULER checkout)")


@dataclass(frozen=True)
class Flavour:
    """Where one original keeps its generators, and the names its config uses."""

    name: str  # protocol name: ruler | memagent
    original: Original
    synthetic: str  # folder of the generator .py files and constants.py
    config: str  # synthetic.yaml
    noise: str  # type_haystack value of the repeated filler ("noise" in RULER, "repeat" in MemAgent)
    vt_noise: tuple[str, str]  # (file, variable) holding variable tracking's filler


FLAVOURS = {
    "ruler": Flavour("ruler", RULER, "scripts/data/synthetic", "scripts/synthetic.yaml", "noise",
                     ("variable_tracking.py", "haystack")),
    "memagent": Flavour("memagent", MEMAGENT, "taskutils/memory_data/synthetic",
                        "taskutils/memory_data/synthetic/synthetic.yaml", "repeat",
                        ("variable_tracking.py", "noise")),
}


@dataclass(frozen=True)
class PaperText:
    """Everything worded by the original that its generators put into a sample."""

    flavour: Flavour
    tasks: dict[str, dict[str, Any]]  # constants.TASKS: template, answer_prefix, tokens_to_generate
    configs: dict[str, dict[str, Any]]  # synthetic.yaml: task name -> {task, args}
    needle: str
    niah_noise: str
    vt_noise: str
    document: str  # qa's "Document {i}:\n{document}"


def _literal(original: Original, path: Path, name: str) -> Any:
    """The literal assigned to ``name`` at the top of ``path`` (parsed, never run)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except OSError:
        raise OriginalMissing(f"{original.flag}: {path} not found; expected a checkout of {original.url} "
                              f"(commit {original.commit[:7]})") from None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise OriginalMissing(f"{original.flag}: {path} assigns no {name}; expected {original.name} at commit "
                          f"{original.commit[:7]}")


def _yaml(original: Original, path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError:
        raise OriginalMissing(f"{original.flag}: {path} not found; expected a checkout of {original.url} "
                              f"(commit {original.commit[:7]})") from None
    if not isinstance(data, dict):
        raise OriginalMissing(f"{original.flag}: {path} is not {original.name}'s task table")
    return data


@functools.lru_cache(maxsize=4)
def _load(flavour_name: str, root: str) -> PaperText:
    flavour = FLAVOURS[flavour_name]
    o, base = flavour.original, Path(root)
    syn = flavour.synthetic
    return PaperText(
        flavour=flavour,
        tasks=_literal(o, base / syn / "constants.py", "TASKS"),
        configs=_yaml(o, base / flavour.config),
        needle=read_string_constant(o, base, f"{syn}/niah.py", "needle"),
        niah_noise=read_string_constant(o, base, f"{syn}/niah.py", "haystack"),
        vt_noise=read_string_constant(o, base, f"{syn}/{flavour.vt_noise[0]}", flavour.vt_noise[1]),
        document=read_string_constant(o, base, f"{syn}/qa.py", "DOCUMENT_PROMPT"),
    )


def load_paper_text(flavour: str, repo: str | Path | None) -> PaperText:
    """The original's text from ``repo`` (else its environment variable); one-line error when missing."""
    if flavour not in FLAVOURS:
        raise ValueError(f"--protocol: {flavour!r} has no original text; choose ruler or memagent")
    root = checkout(FLAVOURS[flavour].original, repo)
    return _load(flavour, str(root.resolve()))


# --- vocabularies ---------------------------------------------------------------------------------

@functools.lru_cache(maxsize=4)
def wonderwords_list(name: str) -> tuple[str, ...]:
    """One of the ``wonderwords`` package's word files (nounlist.txt, adjectivelist.txt, verblist.txt)."""
    try:
        from wonderwords import random_word
    except ImportError:
        raise ValueError("--protocol ruler|memagent: the 'wonderwords' package is missing (pip install "
                         "wonderwords); RULER draws its keys and cwe words from its lists") from None
    return tuple(random_word._get_words_from_text_file(name))


class WordPairs(Sequence[str]):
    """``sorted(set(f"{adj}-{noun}"))`` over wonderwords' lists, without building its 6 million strings.

    RULER's needle keys are ``random.choice`` of that list, which only needs ``len`` and indexing.
    Strings that share an ``adj-`` prefix form a block in sorted order unless one adjective's
    ``adj-`` is a prefix of another's (``high-`` / ``high-pitched-``); such a family is one block
    built in full (sorted, duplicates removed), every other adjective's block is indexed directly.
    """

    def __init__(self, adjectives: Sequence[str], nouns: Sequence[str]) -> None:
        self.nouns = sorted(set(nouns))
        prefixes = sorted({f"{a}-" for a in adjectives})
        self._blocks: list[tuple[int, str | list[str]]] = []  # (start, prefix or materialised block)
        start, i = 0, 0
        while i < len(prefixes):
            root, j = prefixes[i], i + 1
            while j < len(prefixes) and prefixes[j].startswith(root):
                j += 1
            block: str | list[str] = root if j == i + 1 else sorted(
                {p + n for p in prefixes[i:j] for n in self.nouns})
            self._blocks.append((start, block))
            start += len(self.nouns) if isinstance(block, str) else len(block)
            i = j
        self._starts = [s for s, _ in self._blocks]
        self._len = start

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> str:  # type: ignore[override]
        if not 0 <= index < self._len:
            raise IndexError(index)
        import bisect

        start, block = self._blocks[bisect.bisect_right(self._starts, index) - 1]
        if isinstance(block, str):
            return block + self.nouns[index - start]
        return block[index - start]

    def __iter__(self) -> Iterator[str]:
        """Block by block: ``Sequence``'s default would look every index up (6 million bisects)."""
        for _, block in self._blocks:
            if isinstance(block, str):
                yield from (block + noun for noun in self.nouns)
            else:
                yield from block


@functools.lru_cache(maxsize=1)
def key_words() -> WordPairs:
    """niah's "words" keys: every adjective-noun pair of wonderwords, sorted."""
    return WordPairs(wonderwords_list("adjectivelist.txt"), wonderwords_list("nounlist.txt"))


def cwe_words(seed: int) -> list[str]:
    """cwe's vocabulary: wonderwords' nouns, adjectives and verbs, sorted, shuffled by ``Random(seed)``."""
    import random

    words = sorted(set(wonderwords_list("nounlist.txt") + wonderwords_list("adjectivelist.txt")
                       + wonderwords_list("verblist.txt")))
    random.Random(seed).shuffle(words)
    return words


def read_english_words(path: str | Path | None) -> list[str]:
    """RULER's english_words.json values (cwe's vocabulary beyond wonderwords')."""
    if path is None:
        raise ValueError(f"--english-words: this cwe haystack needs more words than wonderwords has; pass "
                         f"{ENGLISH_WORDS_HINT}")
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"--english-words {path}: expected a JSON object (RULER's english_words.json)")
    return list(data.values())


# --- essays ---------------------------------------------------------------------------------------

def read_essay_words(path: str | Path) -> list[str]:
    """The essay haystack as RULER splits it: the ``text`` of the JSON file, whitespace runs -> one space, split.

    A plain text file (not JSON) is taken whole, so a stand-in prose file works too.
    """
    raw = Path(path).read_text(encoding="utf-8")
    try:
        data = json.loads(raw)
    except ValueError:
        text = raw
    else:
        if not isinstance(data, dict) or not isinstance(data.get("text"), str):
            raise ValueError(f"--essay {path}: expected {{\"text\": ...}} ({ESSAY_HINT})")
        text = data["text"]
    return re.sub(r"\s+", " ", text).split(" ")


_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*(?= )")


def simple_sentences(text: str) -> list[str]:
    """memrl's stand-in for NLTK's punkt: a sentence ends at ``.``, ``!`` or ``?`` (plus closing quotes) before a space.

    Punkt also knows abbreviations (``Mr.``, ``e.g.``), so where the essay has them the two split
    differently; the tests run the originals with this same splitter in punkt's place.
    """
    out, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        out.append(text[start:m.end()])
        start = m.end() + 1
    if start < len(text):
        out.append(text[start:])
    return [s for s in out if s]


def sentence_splitter() -> tuple[Callable[[str], list[str]], str]:
    """NLTK's ``sent_tokenize`` (as the originals) when nltk and its punkt data are installed, else memrl's."""
    try:
        from nltk.tokenize import sent_tokenize

        sent_tokenize("A test. Another one.")
    except (ImportError, LookupError):
        return simple_sentences, ("memrl's splitter (nltk punkt not installed: essay needles may sit at other "
                                  "sentence breaks than RULER's)")
    return sent_tokenize, "nltk punkt (as RULER)"
