"""Run the papers' own data scripts (from ``../shared/originals``) to make golden outputs inside a test.

The scripts import hub tokenizers, pandas, HF ``datasets`` and a process-pool helper at module
level; those are replaced by stand-ins here (a whitespace "tokenizer", a DataFrame that keeps its
rows, a ``load_dataset`` that returns the test's questions, and a map that runs as one forked worker
would: see :class:`_Executor`). Nothing of theirs is copied into memrl: the test loads their files
from the shared folder and skips when it is absent.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import random
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
ORIGINALS = Path(os.environ.get("MEMRL_SHARED_ORIGINALS", REPO.parent / "shared" / "originals"))
MEMAGENT_DATA = ORIGINALS / "memagent" / "taskutils" / "memory_data"
REMEMR1_DATA = ORIGINALS / "rememr1" / "taskutils" / "data_synthesis"


def require_originals() -> Path:
    if not (MEMAGENT_DATA / "different_docs_eval.py").is_file() or not (REMEMR1_DATA / "process_test.py").is_file():
        pytest.skip(f"the originals' scripts are not at {ORIGINALS} (set MEMRL_SHARED_ORIGINALS to run these tests)")
    return ORIGINALS


class _Tokenizer:
    def __call__(self, texts: list[str]) -> dict[str, list[list[int]]]:
        return {"input_ids": [[0] * len(t.split()) for t in texts]}


class _DataFrame:
    """pandas stand-in: ``DataFrame(rows).to_parquet(path)`` keeps the rows (written as JSON for the test)."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def to_parquet(self, path: str) -> None:
        Path(path + ".rows.json").write_text(json.dumps(self.rows, ensure_ascii=False))


class _Executor:
    """``utils.TqdmExecutor`` as one forked worker runs it, in this process.

    A forked worker gets a copy of the parent's globals (so MemAgent's in-place shuffle of ``DOCS``
    stays in the worker) and a module RNG Python reseeds from OS entropy; here that RNG is
    ``worker(num_docs)``, memrl's fixed stand-in, and the parent's RNG is untouched by the draws.
    The first run also takes the 24 bits that ``rich`` (imported by the real ``utils``) draws from the
    parent's RNG when the script first prints through it; a test process has loaded rich already.
    """

    worker: Any = None
    fresh = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def run(self, func: Any, *iters: Any, **const: Any) -> list[Any]:
        if _Executor.fresh:
            random.getrandbits(24)
            _Executor.fresh = False
        parent, module = random.getstate(), func.__globals__
        docs = module.get("DOCS")
        module["DOCS"] = list(docs)
        random.setstate(_Executor.worker(const["num_docs"]).getstate())
        try:
            return [func(*args, **const) for args in zip(*iters)]
        finally:
            module["DOCS"] = docs
            random.setstate(parent)


def _stub_modules(flashrag_rows: Any) -> dict[str, types.ModuleType]:
    transformers = types.ModuleType("transformers")
    transformers.AutoTokenizer = types.SimpleNamespace(from_pretrained=lambda *a, **k: _Tokenizer())
    pandas = types.ModuleType("pandas")
    pandas.DataFrame = _DataFrame
    utils = types.ModuleType("utils")
    utils.TqdmExecutor = _Executor
    datasets = types.ModuleType("datasets")
    if isinstance(flashrag_rows, dict):  # rows per data source, for a run over several
        datasets.load_dataset = lambda repo, source, **k: {"dev": list(flashrag_rows[source])}
    else:
        datasets.load_dataset = lambda *a, **k: {"dev": list(flashrag_rows or [])}
    tqdm = types.ModuleType("tqdm")
    tqdm.tqdm = lambda it, *a, **k: it
    return {"transformers": transformers, "pandas": pandas, "utils": utils, "datasets": datasets, "tqdm": tqdm}


@contextlib.contextmanager
def original_module(path: Path, flashrag_rows: Any = None, *, paper: str = "", seed: int = 42) -> Iterator[Any]:
    """The script at ``path`` loaded with stand-ins, the global RNG saved and restored around it; its
    workers draw from ``worker_rng(paper, seed, N)`` (memrl's fixed stand-in for their unseeded RNG)."""
    from memrl.data.paper_docs import worker_rng

    _Executor.worker = lambda n: worker_rng(paper, seed, n)
    _Executor.fresh = True
    stubs = _stub_modules(flashrag_rows)
    saved = {name: sys.modules.get(name) for name in stubs}
    state = random.getstate()
    sys.modules.update(stubs)
    try:
        spec = importlib.util.spec_from_file_location(f"_original_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        random.setstate(state)
        for name, mod in saved.items():
            if mod is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod


# The start of a script that runs an original unmodified in a fresh process (so ``rich`` is not loaded yet):
# only what this environment lacks is stood in for; its executor forks real workers.
REAL_RUN_PRELUDE = """
import json, os, random, sys, types, importlib.util
for name in ("dill", "uvloop"):  # the executor's optional speedups; rich, tqdm and the process pool are real
    m = types.ModuleType(name)
    m.install, m.dumps, m.loads = (lambda: None), (lambda f: b""), (lambda b: None)
    sys.modules[name] = m
tr = types.ModuleType("transformers")
tr.AutoTokenizer = types.SimpleNamespace(from_pretrained=lambda *a, **k: (lambda texts: {"input_ids": [[0]] * len(texts)}))
sys.modules["transformers"] = tr
"""


def run_real(tmp_path: Path, script: str, *args: str) -> Any:
    """``script`` run by this interpreter in a fresh process (its file in ``tmp_path``); the finished process."""
    import subprocess

    path = tmp_path / "run_original.py"
    path.write_text(script)
    return subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, timeout=240)


def to_flashrag(rec: dict[str, Any]) -> dict[str, Any]:
    """An official HotpotQA row in FlashRAG's layout (what ReMemR1's script reads from the hub)."""
    return {
        "id": rec["_id"], "question": rec["question"], "golden_answers": [rec["answer"]],
        "metadata": {
            "type": rec.get("type"), "level": rec.get("level"),
            "supporting_facts": {"title": [t for t, _ in rec["supporting_facts"]],
                                 "sent_id": [s for _, s in rec["supporting_facts"]]},
            "context": {"title": [t for t, _ in rec["context"]], "sentences": [s for _, s in rec["context"]]},
        },
    }
