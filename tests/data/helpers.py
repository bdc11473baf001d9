"""Small HotpotQA-schema fixtures written by tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def make_example(i: int, n_para: int = 4) -> dict[str, Any]:
    paras = [[f"Title {i}-{j}", [f"Sentence {i}.{j}.0 about topic {j}.", f" More on {i}.{j}."]]
             for j in range(n_para)]
    return {
        "_id": f"q{i}",
        "question": f"What is fact {i}?",
        "answer": f"answer {i}",
        "supporting_facts": [[f"Title {i}-0", 0], [f"Title {i}-1", 1]],
        "context": paras,
        "type": "bridge",
        "level": "easy",
    }


def write_examples(path: Path, n: int = 6, n_para: int = 4, jsonl: bool = False) -> Path:
    rows = [make_example(i, n_para) for i in range(n)]
    if jsonl:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        path.write_text(json.dumps(rows))
    return path
