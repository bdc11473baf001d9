"""``/search?q=``: which episodes of a served folder contain a piece of text.

The served page holds only the episode list, so the text search runs here, over what a person
reads in an opened episode: the decoded prompt and response of each conversation, the messages
and tool calls, the record's summary fields and an eval's transcript. Matching ignores case, as
the page's own search does for a self-contained page (see ``view.js``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memrl.io.json_strings import json_strings
from memrl.view.loader import is_eval, rollout_files
from memrl.view.records import read_json_object, read_jsonl

MAX_QUERY = 200  # characters: a search is typed, not pasted documents


def record_texts(record: Any) -> Iterator[str]:
    """The readable text of a rollout or eval record (ids, numbers and token lists left out)."""
    if not isinstance(record, dict):
        return
    for key in ("sample_id", "task_id", "group_id"):
        if isinstance(record.get(key), str):
            yield record[key]
    yield from json_strings(record.get("info"))
    for conv in record.get("conversations") or []:
        if isinstance(conv, dict):
            yield from json_strings(conv.get("text"))
            yield from json_strings(conv.get("meta"))


def _hit(texts: Iterator[str], needle: str) -> bool:
    return any(needle in t.lower() for t in texts)


def search_episodes(path: Path, query: str, tokenizer: str | None = None, *, steps: str | None = None,
                    last: int | None = None) -> list[str]:
    """Ids (as the page names them) of the episodes whose text contains ``query``, ignoring case."""
    needle, path = query.lower(), Path(path)
    found = []
    if is_eval(path):
        root = path / "episodes"
        for file in root.rglob("*.json"):
            name = file.relative_to(root).with_suffix("").as_posix()
            texts = [*record_texts(read_json_object(file, lambda _: None))]
            for extra in (path / "transcripts" / f"{name}.txt", path / "rollouts" / f"{name}.jsonl"):
                if extra.is_file():
                    body = extra.read_text(encoding="utf-8", errors="replace")
                    texts += [body] if extra.suffix == ".txt" else [t for _, r in read_jsonl(extra, lambda _: None)
                                                                    for t in record_texts(r)]
            if _hit(iter(texts), needle):
                found.append(name)
        return sorted(found)
    files, _ = rollout_files(path, steps, last)
    for file in files:
        step = int(file.stem.split("_")[1])
        found += [f"{step}-{i}" for i, (_, rec) in enumerate(read_jsonl(file, lambda _: None))
                  if _hit(record_texts(rec), needle)]
    return found
