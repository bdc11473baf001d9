"""Multi-hop QA sources in the layouts they are published in: HotpotQA and 2WikiMultihopQA.

2WikiMultihopQA's official ``dev.json`` uses HotpotQA's schema (``_id, question, answer,
supporting_facts=[[title, sent_id]], context=[[title, [sentences]]], type``) plus ``evidences``
(``[subject, relation, object]`` triples, which name the reasoning chain but are not documents)
and has no ``level``. The same data also circulates column-wise, as the Hugging Face parquet
copies and FlashRAG (the source ReMemR1's data script reads) store it:
``context={title: [...], sentences|content: [[...]]}``, ``supporting_facts={title: [...],
sent_id: [...]}``, with FlashRAG adding ``golden_answers`` and moving the rest under ``metadata``.
Every layout is turned into the official row form here, so one validator
(:func:`memrl.data.hotpotqa.parse_hotpotqa_record`) checks them all and names ``file:row:field``.

Paragraph text is the sentences joined with nothing between them, as HotpotQA stores its
sentences (each carries its own leading space) and as ReMemR1 joins 2Wiki's (which do not):
the documents are byte-identical to the ones ReMemR1 evaluates on.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memrl.data.hotpotqa import QAExample, parse_hotpotqa_record
from memrl.data.records import iter_records

# --dataset value -> the name ReMemR1 gives the dataset in its file names (eval_{name}_{N}.json).
DATASET_NAMES = {"hotpotqa": "hotpotqa", "2wiki": "2wikimultihopqa", "2wikimultihopqa": "2wikimultihopqa"}


def dataset_name(dataset: str) -> str:
    """ReMemR1's name for ``--dataset`` (``2wiki`` -> ``2wikimultihopqa``); unknown names are refused."""
    try:
        return DATASET_NAMES[dataset.lower()]
    except KeyError:
        raise ValueError(f"--dataset must be hotpotqa or 2wiki, got {dataset!r}") from None


def _columns_to_pairs(value: Any, text_keys: tuple[str, ...]) -> Any:
    """``{title: [...], <text_key>: [...]}`` -> ``[[title, text], ...]``; anything else unchanged."""
    if not isinstance(value, dict) or "title" not in value:
        return value
    key = next((k for k in text_keys if k in value), None)
    if key is None:
        return value
    titles, texts = value["title"], value[key]
    if not isinstance(titles, list) or not isinstance(texts, list) or len(titles) != len(texts):
        return value  # left for the validator, which names the field
    return [[t, x] for t, x in zip(titles, texts)]


def to_official(rec: dict[str, Any]) -> dict[str, Any]:
    """A record of any known layout in the official HotpotQA/2Wiki row form (official rows unchanged)."""
    meta = rec.get("metadata")
    if isinstance(meta, dict):  # FlashRAG: {id, question, golden_answers, metadata: {...}}
        rec = {**meta, **{k: v for k, v in rec.items() if k != "metadata"}}
    out = dict(rec)
    if "answer" not in out and "answers" not in out and "golden_answers" in out:
        out["answers"] = out.pop("golden_answers")
    out["context"] = _columns_to_pairs(out.get("context"), ("sentences", "content"))
    if "supporting_facts" in out:
        out["supporting_facts"] = _columns_to_pairs(out["supporting_facts"], ("sent_id",))
    if out.get("context") is None:
        out.pop("context")
    return out


def read_multihop(path: str | Path, strict_facts: bool = True, any_gold: bool = False) -> Iterator[QAExample]:
    """Yield validated examples from HotpotQA or 2WikiMultihopQA in any layout above (JSON, JSONL, parquet).

    ``strict_facts=False`` lets a supporting fact cite a title that is not in the context (ReMemR1 skips
    such questions rather than failing); ``any_gold`` keeps a gold answer that normalises to nothing.
    """
    p = Path(path)
    for row, rec in iter_records(p):
        yield parse_hotpotqa_record(to_official(rec), p, row, strict_facts, any_gold)
