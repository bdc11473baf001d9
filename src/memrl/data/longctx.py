"""Long-context QA samples in the layouts MemAgent publishes (BytedTsinghua-SIA/hotpotqa).

Two schemas, readable and writable in JSON (array), JSONL and parquet:

* ``eval`` (``eval_{N}.json``): ``{context, input, answers, num_docs, index}``;
  memrl adds ``id``, ``gold_docs`` (1-based document numbers of the gold
  paragraphs), ``type``, ``level``, which MemAgent's scripts ignore.
* ``train`` (``hotpotqa_train_32k.parquet``, verl's RL dataset layout):
  ``{data_source, prompt=[{role, content}], context, ability,
  reward_model={style, ground_truth}, extra_info={index, question, num_docs}}``.

The context is ``"Document 1:\\n<title>\\n<text>\\n\\nDocument 2:\\n..."``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from memrl.io.atomic import atomic_path, atomic_write
from memrl.data.errors import DataError, check_golds, string_list, type_name
from memrl.data.records import iter_records

Schema = Literal["eval", "train"]
Format = Literal["json", "jsonl", "parquet"]

DOC_SEPARATOR = "\n\n"


def document_header(number: int) -> str:
    return f"Document {number}:\n"


@dataclass
class LongContextSample(Mapping):  # type: ignore[type-arg]
    """One long-context question: a numbered-document context plus gold answers. Also a read-only mapping of its
    record (``"answers" in sample``, ``dict(sample)``, ``sample.keys()``), as a reward written for dict samples
    (TRL's shape) reads it; ``input`` is the question's other name."""

    index: int
    question: str
    answers: list[str]
    context: str
    num_docs: int
    id: str | None = None
    gold_docs: list[int] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        """The sample read as its record (``sample["answers"]``, ``sample["input"]``, an extra column), so a reward
        written for dict samples (TRL's shape) works on the long-context workflows unchanged."""
        name = {"input": "question"}.get(key, key)
        if name in RECORD_FIELDS:
            return getattr(self, name)
        if key in self.extra:
            return self.extra[key]
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __iter__(self) -> Iterator[str]:
        yield from RECORD_FIELDS
        yield from (k for k in self.extra if k not in RECORD_FIELDS)

    def __len__(self) -> int:
        return len(RECORD_FIELDS) + sum(k not in RECORD_FIELDS for k in self.extra)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and (key in RECORD_FIELDS or key == "input" or key in self.extra)


RECORD_FIELDS = ("index", "question", "answers", "context", "num_docs", "id", "gold_docs")


def sample_header(sample: LongContextSample, schema: Schema) -> dict[str, Any]:
    """Every field of a record except ``context``, in the schema's layout."""
    if schema == "eval":
        rec: dict[str, Any] = {
            "input": sample.question,
            "answers": list(sample.answers),
            "num_docs": sample.num_docs,
            "index": sample.index,
        }
        if sample.id is not None:
            rec["id"] = sample.id
        if sample.gold_docs:
            rec["gold_docs"] = list(sample.gold_docs)
        rec.update(sample.extra)
        return rec
    return {
        "data_source": sample.extra.get("data_source", "hotpotqa"),
        "prompt": [{"role": "user", "content": sample.question}],
        "ability": "memory",
        "reward_model": {"style": "rule", "ground_truth": list(sample.answers)},
        "extra_info": {
            "index": sample.index,
            "question": sample.question,
            "num_docs": sample.num_docs,
            **({"gold_docs": list(sample.gold_docs)} if sample.gold_docs else {}),
        },
    }


def _answers(value: Any, file: Path, row: int, name: str) -> list[str]:
    if isinstance(value, str):
        return check_golds([value], file, row, name, indexed=False)
    values = list(value) if isinstance(value, tuple) else value
    return check_golds(string_list(values, file, row, name), file, row, name, indexed=True)


def _int(value: Any, default: int, file: Path, row: int, name: str) -> int:
    """An optional integer field (``index``, ``num_docs``): an int, an integral float or digits; absent or null:
    ``default``."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise DataError(file, row, name, f"expected an integer, got {type_name(value)}")
    try:
        number = float(value) if not isinstance(value, int) else value
    except ValueError:
        raise DataError(file, row, name, f"expected an integer, got {value!r}"[:200]) from None
    if number != number or number in (float("inf"), float("-inf")) or number != int(number):
        raise DataError(file, row, name, f"expected an integer, got {value!r}")
    return int(number)


def _list(value: Any, file: Path, row: int, name: str) -> list[Any]:
    """An optional list field (``gold_docs``): a list, or nothing."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise DataError(file, row, name, f"expected a list, got {type_name(value)}")
    return list(value)


NEEDS = ("a long-context record needs context (the document text), input (the question) and answers "
         "(a list of gold answers)")


def parse_sample(rec: dict[str, Any], file: Path, row: int) -> LongContextSample:
    """Read either schema (detected by its keys)."""
    if "context" not in rec:  # a record of another shape: say what is missing and what a record holds
        raise DataError(file, row, "context", f"missing field; {NEEDS}")
    context = rec.get("context")
    if not isinstance(context, str):
        raise DataError(file, row, "context", f"expected a string, got {type_name(context)}")
    if "input" in rec:  # eval schema
        question = rec["input"]
        if not isinstance(question, str) or not question.strip():
            raise DataError(file, row, "input", "expected a non-empty question string")
        if "answers" not in rec:
            raise DataError(file, row, "answers", f"missing field; {NEEDS}")
        answers = _answers(rec["answers"], file, row, "answers")
        known = {"context", "input", "answers", "num_docs", "index", "id", "gold_docs"}
        return LongContextSample(
            index=_int(rec.get("index"), row - 1, file, row, "index"),
            question=question,
            answers=answers,
            context=context,
            num_docs=_int(rec.get("num_docs"), context.count("Document "), file, row, "num_docs"),
            id=None if rec.get("id") is None else str(rec["id"]),
            gold_docs=_list(rec.get("gold_docs"), file, row, "gold_docs"),
            extra={k: v for k, v in rec.items() if k not in known},
        )
    if "prompt" in rec:  # train (verl) schema
        prompt = rec["prompt"]
        if not isinstance(prompt, (list, tuple)) or not prompt or not isinstance(prompt[0], dict):
            raise DataError(file, row, "prompt", "expected a list of {role, content} messages")
        question = prompt[0].get("content")
        if not isinstance(question, str):
            raise DataError(file, row, "prompt[0].content", f"expected a string, got {type_name(question)}")
        rm = rec.get("reward_model")
        if not isinstance(rm, dict):
            raise DataError(file, row, "reward_model", f"expected an object, got {type_name(rm)}")
        answers = _answers(rm.get("ground_truth"), file, row, "reward_model.ground_truth")
        info = rec.get("extra_info") or {}
        if not isinstance(info, dict):
            raise DataError(file, row, "extra_info", f"expected an object, got {type_name(info)}")
        return LongContextSample(
            index=_int(info.get("index"), row - 1, file, row, "extra_info.index"),
            question=question,
            answers=answers,
            context=context,
            num_docs=_int(info.get("num_docs"), context.count("Document "), file, row,
                          "extra_info.num_docs"),
            gold_docs=_list(info.get("gold_docs"), file, row, "extra_info.gold_docs"),
            extra={"data_source": rec.get("data_source", "hotpotqa")},
        )
    raise DataError(file, row, "input", f"missing field (neither eval 'input' nor train 'prompt' schema); {NEEDS}")


def read_samples(path: str | Path) -> Iterator[LongContextSample]:
    """Yield samples from a JSON array, JSONL or parquet file of either schema."""
    p = Path(path)
    for row, rec in iter_records(p):
        yield parse_sample(rec, p, row)


class SampleWriter:
    """Writes samples one at a time; the context can be streamed in pieces.

    JSON and JSONL stream the context straight to disk (memory stays flat for
    a million-token context); parquet needs each row whole, so it holds one
    sample plus a small row-group buffer. The file appears atomically on
    ``close()``; an exception inside ``with`` leaves nothing behind.
    """

    def __init__(self, path: str | Path, schema: Schema = "eval", fmt: Format | None = None) -> None:
        self.path = Path(path)
        self.schema = schema
        self.fmt: Format = fmt or ("parquet" if self.path.suffix == ".parquet" else
                                   "jsonl" if self.path.suffix == ".jsonl" else "json")
        self.count = 0
        self._ctx: Any = None
        self._fh: IO[Any] | None = None
        self._rows: list[dict[str, Any]] = []
        self._pq_writer: Any = None
        self._pq_tmp: Path | None = None

    def __enter__(self) -> SampleWriter:
        if self.fmt == "parquet":
            self._ctx = atomic_path(self.path)
            self._pq_tmp = self._ctx.__enter__()
        else:
            self._ctx = atomic_write(self.path, "w")
            self._fh = self._ctx.__enter__()
            if self.fmt == "json":
                self._fh.write("[")
        return self

    def write(self, sample: LongContextSample, context_pieces: Iterable[str] | None = None) -> None:
        """Write one sample; ``context_pieces`` (if given) replaces ``sample.context``."""
        pieces = [sample.context] if context_pieces is None else context_pieces
        header = sample_header(sample, self.schema)
        if self.fmt == "parquet":
            row = {"context": "".join(pieces), **header}
            self._rows.append(row)
            if len(self._rows) >= 16:
                self._flush_parquet()
        else:
            fh = self._fh
            assert fh is not None
            if self.fmt == "json":
                fh.write(",\n" if self.count else "\n")
            fh.write('{"context": "')
            for piece in pieces:
                fh.write(json.dumps(piece, ensure_ascii=False)[1:-1])
            fh.write('"')
            for key, value in header.items():
                fh.write(f", {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}")
            fh.write("}")
            if self.fmt == "jsonl":
                fh.write("\n")
        self.count += 1

    def _flush_parquet(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self._rows:
            return
        table = pa.Table.from_pylist(self._rows)
        if self._pq_writer is None:
            self._pq_writer = pq.ParquetWriter(str(self._pq_tmp), table.schema)
        self._pq_writer.write_table(table.cast(self._pq_writer.schema))
        self._rows.clear()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is None:
                if self.fmt == "parquet":
                    self._flush_parquet()
                    if self._pq_writer is None:
                        raise ValueError(f"{self.path}: cannot write an empty parquet file")
                    self._pq_writer.close()
                elif self.fmt == "json":
                    assert self._fh is not None
                    self._fh.write("\n]\n")
            elif self._pq_writer is not None:
                self._pq_writer.close()
        except BaseException as err:
            self._ctx.__exit__(type(err), err, err.__traceback__)
            raise
        self._ctx.__exit__(exc_type, exc, tb)


def write_samples(samples: Iterable[LongContextSample], path: str | Path, schema: Schema = "eval",
                  fmt: Format | None = None) -> int:
    """Write whole samples; returns how many were written."""
    with SampleWriter(path, schema, fmt) as writer:
        for s in samples:
            writer.write(s)
        return writer.count
