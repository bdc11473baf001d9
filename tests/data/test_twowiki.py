"""2WikiMultihopQA: read in its official and column layouts, synthesized as ReMemR1's eval files."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from memrl.data import read_samples
from memrl.data.twowiki import read_multihop, to_official


def wiki_example(i: int, n_para: int = 6, hops: int = 2) -> dict[str, Any]:
    """A made-up row in 2Wiki's official layout: no leading spaces, ``evidences`` triples, no ``level``."""
    paras = [[f"Entity {i}-{j}", [f"Entity {i}-{j} is thing number {j}.", f"It belongs to set {i}."]]
             for j in range(n_para)]
    # supporting facts name the hops in reasoning order, which is not context order
    hop_titles = [f"Entity {i}-{j}" for j in (3, 1, 4, 0)[:hops]]
    return {
        "_id": f"w{i}",
        "type": "compositional" if hops == 2 else "bridge_comparison",
        "question": f"Who founded the thing of set {i}?",
        "context": paras,
        "supporting_facts": [[t, 0] for t in hop_titles] + [[hop_titles[0], 1]],
        "evidences": [[hop_titles[0], "founded by", f"Person {i}"]],
        "answer": f"Person {i}",
    }


def write_wiki(path: Path, n: int = 5, hops: int = 2) -> Path:
    path.write_text(json.dumps([wiki_example(i, hops=hops) for i in range(n)]))
    return path


def columns(rec: dict[str, Any]) -> dict[str, Any]:
    """The same row as FlashRAG stores it (golden_answers, metadata with column-wise context)."""
    return {
        "id": rec["_id"], "question": rec["question"], "golden_answers": [rec["answer"]],
        "metadata": {
            "type": rec["type"],
            "context": {"title": [t for t, _ in rec["context"]], "content": [s for _, s in rec["context"]]},
            "supporting_facts": {"title": [t for t, _ in rec["supporting_facts"]],
                                 "sent_id": [k for _, k in rec["supporting_facts"]]},
            "evidences": rec["evidences"],
        },
    }


def synth(*args: object) -> tuple[int, list[str]]:
    from memrl.cli.main import app

    r = CliRunner().invoke(app, ["data", "synth", *map(str, args)])
    return r.exit_code, r.output.strip().splitlines()


def documents(context: str) -> list[str]:
    """The documents of a context, in order (``Document k:`` headers stripped)."""
    parts = re.split(r"(?:^|\n\n)Document \d+:\n", context)
    return parts[1:]


def test_official_2wiki_row(tmp_path):
    (ex,) = list(read_multihop(write_wiki(tmp_path / "dev.json", n=1)))
    assert ex.id == "w0" and ex.answers == ["Person 0"] and ex.type == "compositional" and ex.level is None
    assert ex.gold_titles == ["Entity 0-3", "Entity 0-1"]  # supporting-fact order, each title once
    assert ex.paragraphs[0].text == "Entity 0-0 is thing number 0.It belongs to set 0."  # joined as ReMemR1 does
    assert ex.extra["evidences"] == [["Entity 0-3", "founded by", "Person 0"]]


def test_column_layout_reads_as_the_official_row(tmp_path):
    rows = [wiki_example(i) for i in range(3)]
    official = tmp_path / "dev.json"
    official.write_text(json.dumps(rows))
    flash = tmp_path / "flash.jsonl"
    flash.write_text("".join(json.dumps(columns(r)) + "\n" for r in rows))
    a, b = list(read_multihop(official)), list(read_multihop(flash))
    for x, y in zip(a, b, strict=True):
        assert (x.id, x.question, x.answers, x.paragraphs, x.gold_titles, x.type) == \
               (y.id, y.question, y.answers, y.paragraphs, y.gold_titles, y.type)
    assert to_official(rows[0]) == rows[0]  # an official row passes through unchanged


def test_min_distance_files_with_rememr1_names(tmp_path):
    src = write_wiki(tmp_path / "dev.json", n=5, hops=4)
    out = tmp_path / "out"
    code, lines = synth("--input", src, "--dataset", "2wiki", "--docs", "20,30", "--min-distance", "6",
                        "--rememr1-names", "--out", out)
    assert code == 0, lines
    names = sorted(p.name for p in out.glob("eval_*.json"))
    assert names == ["eval_2wikimultihopqa_20_min_distance_6.json", "eval_2wikimultihopqa_30_min_distance_6.json"]
    rows = {r["_id"]: r for r in json.loads(src.read_text())}
    for name in names:
        samples = list(read_samples(out / name))
        assert len(samples) == 5
        for s in samples:
            docs = documents(s.context)
            assert len(docs) == s.num_docs
            row = rows[s.id]
            fact_titles = list(dict.fromkeys(t for t, _ in row["supporting_facts"]))
            idx = s.extra["evidence_idx"]
            # every gold document is present, at the recorded position, in reverse supporting-fact order
            assert [docs[i].split("\n", 1)[0] for i in idx] == fact_titles
            assert idx == sorted(idx, reverse=True) and s.extra["is_reverse_ordered"]
            assert min(a - b for a, b in zip(idx, idx[1:])) >= 6 and s.extra["min_distance"] >= 6
            assert sorted(i + 1 for i in idx) == s.gold_docs


def test_default_names_and_forward_order(tmp_path):
    src = write_wiki(tmp_path / "dev.json")
    code, lines = synth("--input", src, "--dataset", "2wiki", "--docs", "25", "--min-distance", "10",
                        "--evidence-order", "forward", "--out", tmp_path / "out")
    assert code == 0, lines
    assert sorted(p.name for p in (tmp_path / "out").glob("eval_*")) == ["eval_25.json"]
    for s in read_samples(tmp_path / "out" / "eval_25.json"):
        idx = s.extra["evidence_idx"]
        assert s.extra["is_ordered"] and idx[1] - idx[0] >= 10


def test_deterministic_in_the_seed(tmp_path):
    src = write_wiki(tmp_path / "dev.json", n=4)

    def run(seed: int, out: str) -> str:
        code, lines = synth("--input", src, "--docs", "24", "--min-distance", "7", "--seed", seed,
                            "--out", tmp_path / out)
        assert code == 0, lines
        return (tmp_path / out / "eval_24.json").read_text()

    assert run(1, "a") == run(1, "b")
    assert run(1, "a") != run(2, "c")


def test_unsatisfiable_distance_fails_up_front_in_one_line(tmp_path):
    src = write_wiki(tmp_path / "dev.json", hops=4)
    out = tmp_path / "out"
    code, lines = synth("--input", src, "--dataset", "2wiki", "--docs", "50", "--min-distance", "20", "--out", out)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0] == ("error: --min-distance 20 cannot be met with --docs 50: 4 evidence documents 20 apart "
                        "need at least 61 documents")
    assert not out.exists() or not list(out.glob("eval_*"))


def test_unknown_dataset_is_refused(tmp_path):
    code, lines = synth("--input", write_wiki(tmp_path / "dev.json"), "--dataset", "musique", "--docs", "10",
                        "--out", tmp_path / "out")
    assert code == 2 and lines == ["error: --dataset must be hotpotqa or 2wiki, got 'musique'"]
