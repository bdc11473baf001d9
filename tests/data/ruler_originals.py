"""Run RULER's and MemAgent's own RULER generator scripts (from ``../shared/originals``) inside a test.

Each script is run as ``prepare.py`` / ``ruler_data_prepare.py`` would run it for one task and
length (model template ``base``, chunk 0, no newline removal), with stand-ins for what cannot
load here: the hub tokenizer (a counter the test also gives memrl), NLTK's punkt (memrl's
stand-in splitter, the same on both sides), ``scipy.special.zeta`` when scipy is absent
(``pi**2/6``, which equals scipy 1.17's ``zeta(2.0)``), tqdm, logging set-up, and the writers,
which hand the records back. Their input files (the essay, english_words.json, the QA files) are
stand-ins written to a temporary copy of the script folder. The scripts' text and code stay in
the shared folder; nothing of theirs is copied into memrl.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import random
import re
import runpy
import shutil
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ORIGINALS = Path(os.environ.get("MEMRL_SHARED_ORIGINALS", REPO.parent / "shared" / "originals"))
SYNTHETIC = {"ruler": ORIGINALS / "ruler" / "scripts" / "data" / "synthetic",
             "memagent": ORIGINALS / "memagent" / "taskutils" / "memory_data" / "synthetic"}
CONFIG = {"ruler": ORIGINALS / "ruler" / "scripts" / "synthetic.yaml",
          "memagent": SYNTHETIC["memagent"] / "synthetic.yaml"}
SCRIPTS = {"niah": "niah.py", "variable_tracking": "variable_tracking.py", "common_words_extraction":
           "common_words_extraction.py", "freq_words_extraction": "freq_words_extraction.py", "qa": "qa.py"}
_TOKEN = re.compile(r"\w+|[^\w\s]")


def require(flavour: str) -> Path:
    """The original's repository folder, or a skip saying where the tests look."""
    if not (SYNTHETIC[flavour] / "niah.py").is_file() or not CONFIG[flavour].is_file():
        pytest.skip(f"{flavour}'s RULER generators are not at {SYNTHETIC[flavour]} (set MEMRL_SHARED_ORIGINALS "
                    "to a copy of ../shared/originals to run these tests)")
    return ORIGINALS / flavour


class WordCounter:
    """The tokenizer both sides use: words and punctuation marks (memrl's approximate counter's rule)."""

    name = "test words+punctuation"
    exact = False

    def count(self, text: str) -> int:
        return sum(1 for _ in _TOKEN.finditer(text))


class HFTokenizer:
    """RULER's ``hf`` tokenizer (``tokenizer.py``): ``text_to_tokens`` is ``AutoTokenizer.tokenize``."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def text_to_tokens(self, text: str) -> list[str]:
        return self.tokenizer.tokenize(text)


class _Tokenizer:
    def text_to_tokens(self, text: str) -> list[str]:
        return _TOKEN.findall(text)


def _task_config(flavour: str, task: str) -> tuple[dict[str, Any], dict[str, Any]]:
    configs = yaml.safe_load(CONFIG[flavour].read_text())
    base = runpy.run_path(str(SYNTHETIC[flavour] / "constants.py"))["TASKS"]
    cfg = configs[task]
    return cfg, base[cfg["task"]]


def _argv(flavour: str, task: str, length: int, samples: int, seed: int, out: Path,
          pre_samples: int) -> tuple[str, list[str]]:
    """The script and its arguments, as the prepare script builds them (``base`` model template)."""
    cfg, base = _task_config(flavour, task)
    prefix = base.get("answer_prefix", "")
    template = base["template"] + prefix if flavour == "ruler" else base["template"]
    argv = ["--save_dir", str(out), "--save_name", task, "--tokenizer_path", "stand-in", "--tokenizer_type", "hf",
            "--max_seq_length", str(length), "--tokens_to_generate", str(base["tokens_to_generate"]),
            "--num_samples", str(samples), "--random_seed", str(seed)]
    for k, v in cfg["args"].items():
        argv += [f"--{k}", str(v)]
    if cfg["task"] == "qa":
        argv += ["--pre_samples", str(pre_samples)]
    argv += ["--template", template]
    if flavour == "memagent":
        argv += ["--answer_prefix", prefix]
    return SCRIPTS[cfg["task"]], argv


def _stubs(captured: list[Any], splitter: Any, tokenizer: Any) -> dict[str, types.ModuleType]:
    def module(name: str, **attrs: Any) -> types.ModuleType:
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        return m

    def write(path: Any, records: Any) -> None:
        captured.append(records)

    stubs = {
        "tokenizer": module("tokenizer", select_tokenizer=lambda *a, **k: tokenizer),
        "manifest_utils": module("manifest_utils", write_manifest=write),
        "synthetic.nemo": module("synthetic.nemo", write_manifest=write, read_manifest=lambda p: []),
        "nltk": module("nltk"),
        "nltk.tokenize": module("nltk.tokenize", sent_tokenize=splitter),
        "tqdm": module("tqdm", tqdm=lambda it, *a, **k: it),
    }
    try:
        import scipy.special  # noqa: F401
    except ImportError:
        def zeta(alpha: float) -> float:
            assert alpha == 2.0, "without scipy only alpha 2 (RULER's setting) is known exactly"
            return math.pi ** 2 / 6

        stubs["scipy"] = module("scipy")
        stubs["scipy.special"] = module("scipy.special", zeta=zeta)
    return stubs


@contextlib.contextmanager
def _isolated(stubs: dict[str, types.ModuleType], path: list[str], cwd: Path) -> Iterator[None]:
    """Stand-in modules, sys.path, cwd, RNG states and logging set-up restored afterwards."""
    import logging

    names = list(stubs) + ["constants", "synthetic", "synthetic.constants"]
    saved = {n: sys.modules.get(n) for n in names}
    state, np_state, old_path, old_cwd = random.getstate(), np.random.get_state(), list(sys.path), os.getcwd()
    basic, argv = logging.basicConfig, list(sys.argv)
    for n in names:
        sys.modules.pop(n, None)
    sys.modules.update(stubs)
    sys.path[:0] = path
    logging.basicConfig = lambda *a, **k: None  # type: ignore[assignment]
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(old_cwd)
        logging.basicConfig = basic  # type: ignore[assignment]
        sys.path[:], sys.argv[:] = old_path, argv
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m
        random.setstate(state)
        np.random.set_state(np_state)


def place_inputs(flavour: str, work: Path, files: dict[str, Path]) -> Path:
    """A copy of the script folder with the input files where the script opens them; returns the script folder."""
    syn = work / "synthetic"
    shutil.copytree(SYNTHETIC[flavour], syn)
    names = {"ruler": {"essay": "json/PaulGrahamEssays.json", "english_words": "json/english_words.json",
                       "hotpotqa": "json/hotpotqa.json", "squad": "json/squad.json"},
             "memagent": {"essay": "synthetic/PaulGrahamEssays.json", "english_words": "english_words.json",
                          "hotpotqa": "hotpotqa_dev.json", "squad": "squad.json"}}[flavour]
    base = syn if flavour == "ruler" else work
    for key, src in files.items():
        dst = base / names[key]
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    return syn


# Records of runs with the stand-in tokenizer, per test process: the records and CLI tests ask for the
# same runs, and each niah run rebuilds the original's 6M-key vocabulary (~8 s on CI's cores).
_RUNS: dict[tuple[Any, ...], list[dict[str, Any]]] = {}


def run_original(flavour: str, task: str, length: int, samples: int, seed: int, work: Path,
                 files: dict[str, Path], splitter: Any, pre_samples: int = 0,
                 tokenizer: Any = None) -> list[dict[str, Any]]:
    """The records the original's script writes for ``task`` at ``length`` (one process, one chunk)."""
    key = (flavour, task, length, samples, seed, pre_samples, splitter, tuple(sorted(files.items())))
    if tokenizer is None and key in _RUNS:
        return copy.deepcopy(_RUNS[key])  # a fresh copy: a caller may change what it gets
    records = _run_original(flavour, task, length, samples, seed, work, files, splitter, pre_samples, tokenizer)
    if tokenizer is None:
        _RUNS[key] = copy.deepcopy(records)
    return records


# niah's module code sorts the 6M adjective-noun keys of wonderwords on every run (~15 s of the ~20 s a run
# takes on CI's cores). The script sees this in place of the builtin: an input of distinct strings whose set
# equals an earlier one's gets that earlier result, which is then exactly what sorting it gives.
_SORTED: list[tuple[set[Any], list[Any]]] = []


def _sorted_once(iterable: Any, /, *, key: Any = None, reverse: bool = False) -> list[Any]:
    items = list(iterable)
    if key is not None or reverse or len(items) < 1_000_000:
        return sorted(items, key=key, reverse=reverse)
    content = set(items)
    distinct = len(content) == len(items)
    for seen, result in _SORTED if distinct else ():
        if seen == content:
            return list(result)
    result = sorted(items)
    if distinct:
        _SORTED.append((content, result))
    return list(result)


def _run_original(flavour: str, task: str, length: int, samples: int, seed: int, work: Path,
                  files: dict[str, Path], splitter: Any, pre_samples: int, tokenizer: Any) -> list[dict[str, Any]]:
    work.mkdir(parents=True, exist_ok=True)
    syn = place_inputs(flavour, work, files)
    script, argv = _argv(flavour, task, length, samples, seed, work / "out", pre_samples)
    captured: list[Any] = []
    with _isolated(_stubs(captured, splitter, tokenizer or _Tokenizer()), [str(syn), str(work)], work):
        sys.argv[:] = [str(syn / script), *argv]
        runpy.run_path(str(syn / script), init_globals={"sorted": _sorted_once}, run_name="__main__")
    assert len(captured) == 1, "the script wrote no manifest"
    records = captured[0]
    return records[0] if flavour == "memagent" else records  # MemAgent writes [records]


def standin_essay(hotpotqa: Path, path: Path) -> Path:
    """A stand-in for PaulGrahamEssays.json: the paragraphs of the shared HotpotQA file as one text."""
    data = json.loads(hotpotqa.read_text())
    text = "\n\n".join("".join(sents) for d in data for _, sents in d["context"])
    path.write_text(json.dumps({"text": text}))
    return path


def standin_squad(hotpotqa: Path, path: Path) -> Path:
    """A SQuAD v2.0-shaped stand-in: each HotpotQA question's paragraphs as one article."""
    data = json.loads(hotpotqa.read_text())
    articles = []
    for d in data:
        paras = [{"context": "".join(s), "qas": []} for _, s in d["context"]]
        paras[0]["qas"] = [{"question": d["question"], "is_impossible": False, "answers": [{"text": d["answer"]}]},
                           {"question": "unanswerable?", "is_impossible": True, "answers": []}]
        articles.append({"title": d["_id"], "paragraphs": paras})
    path.write_text(json.dumps({"data": articles}))
    return path


def standin_english_words(path: Path, n: int = 30000) -> Path:
    """A stand-in for english_words.json: ``n`` distinct made-up words."""
    rng = random.Random(7)
    words: dict[str, str] = {}
    while len(words) < n:
        w = "".join(rng.choice("bcdfghjklmnprstvz") + rng.choice("aeiou") for _ in range(4))
        words.setdefault(w, w)
    path.write_text(json.dumps(words))
    return path
