"""Eval samples read lazily, contexts streamed from disk and encoded chunk-wise: same results as reading whole."""

from __future__ import annotations

import asyncio
import json
from itertools import chain

import pytest

from memrl.config import WorkflowConfig
from memrl.data import DataError, LongContextSample, read_samples, write_samples
from memrl.data.stream import LazySample, read_samples_lazily, scan_records
from memrl.testing import ScriptedEngine
from memrl.workflows import common
from memrl.workflows.common import encode_pieces, encode_text
from memrl.workflows.memagent import memagent

TRICKY = 'Tést \\ "quoted" \u2603 😀 tab\tend.'


def context(docs: int, seed: int = 0) -> str:
    body = [f"Document {k + 1}:\nTitle {k}\nParagraph {k} says {TRICKY} word{(k * 7 + seed) % 13}."
            for k in range(docs)]
    return "\n\n".join(body)


def samples(n: int = 4) -> list[LongContextSample]:
    return [LongContextSample(index=i, question=f"What is {TRICKY} {i}?", answers=["Paris"],
                              context=context(20 * i + 3, i), num_docs=20 * i + 3, id=f"q{i}", gold_docs=[1, 2],
                              extra={"type": "bridge"})
            for i in range(n)]


@pytest.fixture(scope="module")
def tok():
    from memrl.models.resolve import load_tokenizer

    return load_tokenizer("tiny")


@pytest.fixture
def files(tmp_path):
    rows = samples()
    write_samples(rows, tmp_path / "a.json")
    write_samples(rows, tmp_path / "a.jsonl")
    # ReMemR1's layout: indent=4, ASCII escapes, context key not first, a nested "context" before it
    recs = [{"input": s.question, "meta": {"context": "not this one"}, "context": s.context, "answers": s.answers,
             "num_docs": s.num_docs, "index": s.index} for s in rows]
    (tmp_path / "b.json").write_text(json.dumps(recs, indent=4, ensure_ascii=True))
    return rows, [tmp_path / "a.json", tmp_path / "a.jsonl", tmp_path / "b.json"]


@pytest.mark.parametrize("block", [5, 64, 1 << 20])
def test_lazy_samples_equal_eager_ones(files, block, monkeypatch):
    rows, paths = files
    monkeypatch.setattr("memrl.data.stream.BLOCK", block)
    for path in paths:
        lazy, eager = list(read_samples_lazily(path)), list(read_samples(path))
        assert all(isinstance(s, LazySample) for s in lazy)
        for a, b, src in zip(lazy, eager, rows, strict=True):
            assert (a.index, a.question, a.answers, a.num_docs, a.extra) == (b.index, b.question, b.answers,
                                                                             b.num_docs, b.extra)
            assert a.context == b.context == src.context
            assert "".join(a.context_pieces(7)) == src.context  # pieces never split an escape or a character


def test_scan_finds_the_top_level_context(files):
    _, paths = files
    raw = paths[2].read_bytes()
    for span in scan_records(paths[2], block=3):
        start, end = span.context
        assert json.loads(raw[span.start:span.end])["context"] == json.loads(raw[start - 1:end + 1])


def test_a_cut_off_file_is_an_error_not_fewer_samples(files, tmp_path):
    _, paths = files
    raw = paths[0].read_bytes()
    bad = tmp_path / "cut.json"
    bad.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(DataError, match="not valid JSON"):
        list(read_samples_lazily(bad))


def test_chunkwise_encoding_equals_whole_encoding(tok):
    text = context(60)
    pieces = [text[i:i + 97] for i in range(0, len(text), 97)]
    runs = list(encode_pieces(tok, pieces, piece_chars=300))
    assert len(runs) > 5  # the text really was cut, between documents
    assert list(chain.from_iterable(runs)) == encode_text(tok, text)
    runs = list(encode_pieces(tok, [text], piece_chars=300))  # one big piece is cut too
    assert len(runs) > 5 and list(chain.from_iterable(runs)) == encode_text(tok, text)


class PrefixTokenizer:
    """Encodes every text with a leading marker, as SentencePiece's dummy prefix does: no cut is safe."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [0] + [ord(c) for c in text]


def test_a_tokenizer_unsafe_to_cut_is_encoded_whole():
    tok = PrefixTokenizer()
    text = context(40)
    runs = list(encode_pieces(tok, [text[i:i + 50] for i in range(0, len(text), 50)], piece_chars=300))
    assert runs == [tok.encode(text)]


@pytest.mark.parametrize("max_chunks", [None, 3])
def test_memagent_episode_from_disk_equals_in_memory(tok, files, max_chunks, monkeypatch):
    monkeypatch.setattr(common, "PIECE_CHARS", 400)
    rows, paths = files
    eos = tok.eos_token_id

    def reply(prompt, params):
        return [prompt[-1] % 200 + 3, len(prompt) % 200 + 3, eos]

    cfg = WorkflowConfig(chunk_tokens=64, memory_tokens=4, final_tokens=4, max_chunks=max_chunks)
    for lazy, eager in zip(read_samples_lazily(paths[0]), rows, strict=True):
        a, b = ScriptedEngine(reply), ScriptedEngine(reply)
        ta = asyncio.run(memagent(lazy, a, tok, cfg))
        tb = asyncio.run(memagent(eager, b, tok, cfg))
        assert [c[0] for c in a.calls] == [c[0] for c in b.calls]
        assert ta.metrics == tb.metrics and ta.info == tb.info


def test_documents_are_counted_as_the_context_streams(tmp_path, monkeypatch):
    from memrl.data.stream import count_in_pieces

    text = context(40)
    for size in (1, 3, 8, 9, 10, 100):
        pieces = [text[i:i + size] for i in range(0, len(text), size)]
        assert count_in_pieces(pieces, "Document ") == text.count("Document ") == 40
    # a record without num_docs: counted from its streamed context, in blocks that split the word
    monkeypatch.setattr("memrl.data.stream.BLOCK", 5)
    path = tmp_path / "no_num_docs.jsonl"
    path.write_text(json.dumps({"context": text, "input": "q?", "answers": ["Paris"], "index": 0}) + "\n")
    (sample,) = read_samples_lazily(path)
    assert isinstance(sample, LazySample) and sample.num_docs == 40 == next(iter(read_samples(path))).num_docs


def _rows(n: int) -> list[dict]:
    return [{"input": f"q{i}", "context": "Document 1:\nx", "answers": ["Paris"], "num_docs": 1, "index": i}
            for i in range(n)]


@pytest.mark.parametrize("line, replace, message", [
    (36, "hello world 123", r"junk.jsonl:37: not valid JSON: 'h[\w ]*' where a record"),
    (36, None, r"junk.jsonl:37: not valid JSON: the line ends inside"),  # cut mid-line: not "the file ends"
    (36, "}", r"junk.jsonl:37: not valid JSON: expected an object, got a '}' with no '{'"),
])
@pytest.mark.parametrize("block", [7, 1 << 20])
def test_a_bad_jsonl_line_is_an_error_naming_it_never_a_skipped_row(tmp_path, line, replace, message, block):
    """A junk line, a stray brace or a cut line: the scanner skipped the first two (eval over 49 of 50 samples)."""
    lines = [json.dumps(r) for r in _rows(50)]
    if replace is None:
        lines[line] = lines[line][:40]
    elif replace == "}":
        lines[line] += "}"
    else:
        lines[line] = replace
    path = tmp_path / "junk.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=message):
        list(scan_records(path, block))


@pytest.mark.parametrize("tail, message", [(', "oops"', "expected an object, got a string"),
                                           (", [1, 2]", "expected an object, got a list"),
                                           (", 5", "'5' where a record")])
def test_an_array_element_that_is_not_an_object_is_an_error_naming_the_record_before(tmp_path, tail, message):
    text = json.dumps(_rows(10), indent=4)
    path = tmp_path / "arr.json"
    path.write_text(text[:-1].rstrip() + tail + "\n]")
    with pytest.raises(DataError, match=rf"arr.json:11: not valid JSON: {message}.*\(after record 10\)"):
        list(read_samples_lazily(path))
    path.write_text(text + "\n\n")  # whitespace after the array is fine
    assert len(list(read_samples_lazily(path))) == 10


@pytest.mark.parametrize("bad, why", [(b"\\q", r"not a valid JSON string \(Invalid \\escape at byte \d+ of the file\)"),
                                      (b"\xe9", r"not UTF-8 text \(byte 0xe9 at byte \d+ of the file\)")])
@pytest.mark.parametrize("block", [7, 1 << 20])
def test_a_bad_byte_in_a_context_is_refused_at_load_naming_file_row_and_field(files, tmp_path, bad, why, block,
                                                                                monkeypatch):
    """A context is decoded once at load: a broken sample fails the read, not one episode later in the run."""
    monkeypatch.setattr("memrl.data.stream.BLOCK", block)
    _, paths = files
    raw = paths[1].read_bytes()  # a.jsonl: the second line's context gets the bad byte in its middle
    lines = raw.split(b"\n")
    at = lines[1].index(b"Paragraph 5 says")
    lines[1] = lines[1][:at] + bad + lines[1][at:]
    path = tmp_path / "broken.jsonl"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(DataError, match=rf"broken.jsonl:2:context: {why}") as err:
        list(read_samples_lazily(path))
    byte = int(str(err.value).rsplit("at byte ", 1)[1].split(" ")[0])
    assert path.read_bytes()[byte:byte + len(bad)] == bad  # the byte named is the bad one
    assert len(list(read_samples_lazily(paths[1]))) == 4  # the good file still loads whole
