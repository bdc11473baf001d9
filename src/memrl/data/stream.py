"""Read eval samples one at a time and stream each context from disk in pieces.

An eval file of 128 samples at 25,600 documents (~3.5M tokens each) is ~1.8 GB of JSON:
``json.load`` would hold all of it, and each context as one Python string besides. Here a
scan of the file (in fixed-size blocks, C-speed regexes) finds every record's byte span and
the span of its top-level ``"context"`` string; only the small rest of each record is parsed
up front. A :class:`LazySample` keeps those offsets and yields its context in decoded pieces
straight from the file (:meth:`LazySample.context_pieces`), so the workflow can encode it piece
by piece; ``sample.context`` still returns the whole string for code that needs it.

JSON arrays (any formatting, e.g. ``indent=4`` as ReMemR1 writes them) and JSONL are scanned;
parquet rows are read whole (a parquet row cannot be read partially).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from memrl.data.errors import DataError
from memrl.data.longctx import LongContextSample, parse_sample, read_samples
from memrl.data.records import _check_file, detect_format

BLOCK = 1 << 20  # bytes read per step while scanning, and per context piece
_STRUCT = re.compile(rb'["{}\[\]:,]')
_STRING_BODY = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*', re.S)
# A piece may end after one of these bytes: ASCII, not a backslash, not 'u' or a hex digit, so
# never inside an escape (\n, \", \uXXXX, surrogate pairs) nor inside a UTF-8 sequence.
_SAFE_END = frozenset(range(128)) - set(b"\\u0123456789abcdefABCDEF")


@dataclass
class RecordSpan:
    """Byte offsets of one record and of its top-level context string's content (quotes excluded)."""

    row: int
    start: int
    end: int
    context: tuple[int, int] | None


def scan_records(path: Path, block: int | None = None) -> Iterator[RecordSpan]:
    """Spans of the top-level objects of a JSON array or JSONL file, reading ``block`` bytes at a time.

    Only structure is looked at (brackets, strings, colons and commas at the record's own level);
    the records themselves are parsed later, one at a time. Anything between records that is not an
    object (a stray word, a number, a list, a ``}``) is an error naming its row, never a skipped row:
    a dropped sample would change the denominator of every accuracy computed from the file.
    """
    block = block or BLOCK
    top = _TopLevel(path)
    in_string = after_colon = False
    depth, base, pos = 0, 0, 0
    buf, key = b"", b""
    str_start = rec_start = 0
    last_key: bytes | None = None
    ctx: tuple[int, int] | None = None
    with open(path, "rb") as fh:
        while True:
            if pos >= len(buf):
                more = fh.read(block)
                if not more:
                    if depth:
                        raise DataError(path, top.row + 1, None, "not valid JSON: the file ends inside this record")
                    break
                base, buf, pos = base + len(buf), more, 0
                continue
            if in_string:
                end = _STRING_BODY.match(buf, pos).end()  # type: ignore[union-attr]
                top.in_string(buf[pos:end])
                if len(key) < 40:  # short strings (keys) are kept whole
                    key += buf[pos:end]
                if end >= len(buf) or buf[end] != ord('"'):  # ran into the block's end (maybe mid-escape)
                    more = fh.read(block)
                    if not more:
                        raise DataError(path, top.row + 1, None, "not valid JSON: unterminated string")
                    base, buf, pos = base + end, buf[end:] + more, 0
                    continue
                in_string, pos = False, end + 1
                if depth == 1:
                    if after_colon and last_key == b"context" and ctx is None:
                        ctx = (str_start, base + end)
                    elif not after_colon:
                        last_key = key
                continue
            m = _STRUCT.search(buf, pos)
            top.between(buf[pos:m.start() if m else len(buf)], depth)
            if m is None:
                pos = len(buf)
                continue
            c, pos = buf[m.start()], m.end()
            if depth == 0 and not top.accepts(c):
                continue
            if c == ord('"'):
                in_string, key, str_start = True, b"", base + pos
            elif c in b"{[":
                depth += 1
                if depth == 1:
                    rec_start, ctx, last_key, after_colon = base + m.start(), None, None, False
            elif c in b"}]":
                depth -= 1
                if depth == 0:
                    top.row += 1
                    yield RecordSpan(top.row, rec_start, base + pos, ctx)
            elif depth == 1:
                after_colon = c == ord(":")


class _TopLevel:
    """What may stand between the records of a JSON array or JSONL file: whitespace, the array's own
    brackets and commas; anything else is a one-line error naming the row it follows."""

    def __init__(self, path: Path) -> None:
        self.path, self.row, self.line = path, 0, 1
        self.started = self.array = self.closed = False

    def fail(self, why: str, line: int | None = None) -> None:
        """A JSONL problem names its line; an array's, the record it follows (its records span many lines)."""
        if self.array:
            raise DataError(self.path, self.row + 1, None, f"not valid JSON: {why}"
                            + (f" (after record {self.row})" if self.row else ""))
        raise DataError(self.path, line or self.line, None, f"not valid JSON: {why}")

    def between(self, text: bytes, depth: int) -> None:
        if depth == 0:
            junk = text.strip()
            if junk:
                at = self.line + text[:text.index(junk[:1])].count(b"\n")
                self.fail(f"{junk[:30].decode('utf-8', 'replace')!r} where a record (a JSON object) belongs", at)
            self.line += text.count(b"\n")
        elif not self.array and b"\n" in text:
            self.fail("the line ends inside this record (a JSONL record is one line)")

    def in_string(self, text: bytes) -> None:
        if not self.array and b"\n" in text:
            self.fail("the line ends inside a string of this record (a JSONL record is one line)")

    def accepts(self, c: int) -> bool:
        """Whether structure byte ``c`` at depth 0 starts a record (else it is the array's own, or an error)."""
        if self.closed:
            self.fail("text after the array's closing ']'")
        if not self.started:
            self.started = True
            if c == ord("["):  # the array around the records, not part of one
                self.array = True
                return False
        if c == ord("{"):
            return True
        if c == ord(",") and self.array:
            return False
        if c == ord("]") and self.array:
            self.closed = True
            return False
        kinds = {ord('"'): "a string", ord("["): "a list", ord("}"): "a '}' with no '{'", ord("]"): "a ']'",
                 ord(":"): "a ':'", ord(","): "a ','"}
        self.fail(f"expected an object, got {kinds[c]}")
        return False


def _read(fh: Any, start: int, end: int) -> bytes:
    fh.seek(start)
    return fh.read(end - start)


class LazySample(LongContextSample):
    """A sample whose context stays on disk until it is read, in pieces or whole."""

    def __init__(self, head: LongContextSample, path: Path, span: tuple[int, int], row: int | None = None) -> None:
        self._path, self._span, self._row = path, span, row
        values = {f.name: getattr(head, f.name) for f in fields(LongContextSample) if f.name != "context"}
        super().__init__(context="", **values)

    @property  # type: ignore[override]
    def context(self) -> str:
        return "".join(self.context_pieces())

    @context.setter
    def context(self, value: str) -> None:
        if value:
            raise AttributeError("the context of a sample read from disk cannot be replaced")

    def context_pieces(self, block: int | None = None) -> Iterator[str]:
        """The context, decoded, in pieces of about ``block`` bytes (never splitting an escape or a character)."""
        block = block or BLOCK
        start, end = self._span
        at = start  # the file offset of the piece being decoded
        with open(self._path, "rb") as fh:
            fh.seek(start)
            carry = b""
            left = end - start
            while left > 0 or carry:
                raw = carry + fh.read(min(block, left))
                left = end - fh.tell() if left > 0 else 0
                cut = len(raw)
                if left > 0:
                    cut = next((i + 1 for i in range(len(raw) - 1, -1, -1) if raw[i] in _SAFE_END), 0)
                raw, carry = raw[:cut], raw[cut:]
                if raw:
                    yield self._decoded(raw, at)
                    at += len(raw)
                if left <= 0 and carry and not raw:
                    raise DataError(self._path, self._row, "context", f"cannot decode the string at byte {at}")

    def _decoded(self, raw: bytes, at: int) -> str:
        """One piece of the JSON string; a bad escape or byte is this file's and row's error, at its byte."""
        try:
            return json.loads(b'"' + raw + b'"')
        except UnicodeDecodeError as exc:
            why = f"not UTF-8 text (byte 0x{raw[exc.start - 1]:02x} at byte {at + exc.start - 1} of the file)"
        except json.JSONDecodeError as exc:
            where = at + len(exc.doc[:max(exc.pos - 1, 0)].encode("utf-8", "surrogatepass"))
            why = f"not a valid JSON string ({exc.msg} at byte {where} of the file)"
        raise DataError(self._path, self._row, "context", why)

    def __repr__(self) -> str:
        return f"LazySample(index={self.index}, id={self.id!r}, num_docs={self.num_docs}, file={str(self._path)!r})"


def read_samples_lazily(path: str | Path) -> Iterator[LongContextSample]:
    """Samples of an eval/train file, each holding its context on disk (parquet: read whole)."""
    p = Path(path)
    _check_file(p)
    if detect_format(p) == "parquet":
        yield from read_samples(p)
        return
    with open(p, "rb") as fh:
        for span in scan_records(p):
            if span.context is None:  # no top-level context string: read the record whole (and validate it)
                yield parse_sample(_loads(_read(fh, span.start, span.end), p, span.row), p, span.row)
                continue
            cs, ce = span.context
            head_bytes = _read(fh, span.start, cs) + _read(fh, ce, span.end)  # the context as ""
            rec = _loads(head_bytes, p, span.row)
            head = parse_sample(rec, p, span.row)
            sample = LazySample(head, p, (cs, ce), span.row)
            # decoded once now, whole: a bad escape or byte is the file's error before any episode runs (a
            # sample failing later was left out of the accuracy, and re-running could never fix it)
            docs = count_in_pieces(sample.context_pieces(), "Document ")
            if "num_docs" not in rec and "num_docs" not in (rec.get("extra_info") or {}):
                sample.num_docs = docs
            yield sample


def count_in_pieces(pieces: Iterable[str], needle: str) -> int:
    """``"".join(pieces).count(needle)`` without joining: a long context is counted as it streams.

    For a needle that cannot overlap itself (no prefix of it is also its suffix), as ``"Document "``.
    """
    count, tail = 0, ""
    for piece in pieces:
        text = tail + piece
        count += text.count(needle)
        # the last len(needle)-1 characters cannot hold a whole match, so none is counted twice
        tail = text[-(len(needle) - 1):] if len(needle) > 1 else ""
    return count


def _loads(raw: bytes, path: Path, row: int) -> dict[str, Any]:
    try:
        rec = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(path, row, None, f"not valid JSON: {exc}") from None
    if not isinstance(rec, dict):
        raise DataError(path, row, None, f"expected an object, got {type(rec).__name__}")
    return rec
