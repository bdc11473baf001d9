"""run_ruler_suite end to end: MemAgent with a scripted engine on generated RULER files."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from memrl.config import MemRLConfig
from memrl.data import read_samples
from memrl.data.ruler import write_task_file
from memrl.data.ruler_base import RulerSources
from memrl.data.tokens import load_token_counter
from memrl.engines.base import EngineError
from memrl.eval import ruler_suite
from memrl.eval.runner import AllEpisodesFailedError
from memrl.eval.ruler_suite import find_ruler_files, run_ruler_suite
from memrl.testing import ScriptedEngine
from memrl.types import Trajectory
from memrl.workflows.registry import as_workflow

FILES = [("niah_multivalue", 1024), ("vt", 1024), ("fwe", 1024), ("niah_multivalue", 2048)]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ruler")
    counter = load_token_counter("tiny")
    for task, length in FILES:
        write_task_file(root, task, length, counter, samples=2, seed=1, sources=RulerSources())
    return root


@pytest.fixture(scope="module")
def tok():
    from memrl.models.resolve import load_tokenizer

    return load_tokenizer("tiny")


def _cfg() -> MemRLConfig:
    return MemRLConfig.model_validate({
        "model": {"path": "fake"}, "engine": {"concurrency": 2},
        "workflow": {"name": "memagent", "chunk_tokens": 4096, "memory_tokens": 8, "final_tokens": 64}})


def answering_engine(tok, data_dir: Path) -> ScriptedEngine:
    """Memory turns write nothing useful; the final turn answers from a key of known golds.

    niah_multivalue at 1K: every value, boxed (score 1). vt: two of five names, lower-cased,
    boxed (0.4). fwe: no answer (0). niah_multivalue at 2K: every value in prose, no box (1).
    """
    plan: dict[str, str] = {}
    for task, length in FILES:
        for s in read_samples(data_dir / f"ruler_{task}_{length}.jsonl"):
            if task == "niah_multivalue":
                answer = ", ".join(s.answers)
                plan[s.question] = f"\\boxed{{{answer}}}" if length == 1024 else f"They are {answer}."
            elif task == "vt":
                plan[s.question] = "\\boxed{" + " ".join(a.lower() for a in s.answers[:2]) + "}"
            else:
                plan[s.question] = "I could not tell."

    def reply(prompt: list[int], params) -> list[int]:
        if params.max_new_tokens != 64:  # a memory turn
            return tok.encode("notes", add_special_tokens=False) + [tok.eos_token_id]
        text = tok.decode(prompt)
        (answer,) = [a for q, a in plan.items() if q in text]
        return tok.encode(answer, add_special_tokens=False) + [tok.eos_token_id]

    return ScriptedEngine(reply)


def test_suite_scores_with_rulers_metric_and_writes_the_table(tmp_path, data_dir, tok, capsys):
    out = tmp_path / "out"
    engine = answering_engine(tok, data_dir)
    res = asyncio.run(run_ruler_suite(_cfg(), engine, tok, data_dir, out, lengths=None, tasks=None,
                                      max_samples=None))
    # vt and fwe exist at 1K only: the 2K average is over one task, and the run says so
    assert "lacks ruler_fwe_2048.jsonl and 1 more: the averages" in capsys.readouterr().err
    by = res["by_task"]
    assert list(by) == ["niah_multivalue", "vt", "fwe"] and res["lengths"] == [1024, 2048]
    assert by["niah_multivalue"]["1024"]["score"] == 100.0
    assert by["vt"]["1024"]["score"] == 40.0  # 2 of 5 names, case-insensitive
    assert by["fwe"]["1024"]["score"] == 0.0
    assert by["niah_multivalue"]["2048"]["score"] == 100.0  # unboxed prose still contains every value
    assert res["average"] == {"1024": pytest.approx(46.67), "2048": 100.0}
    assert by["vt"]["1024"]["metric"] == "string_match_all" and by["vt"]["1024"]["finished"] == 2
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk["by_task"] == by
    table = (out / "results.md").read_text()
    assert "| task | metric | 1K | 2K |" in table
    assert "| vt | all | 40.00 |  |" in table and "| **average** | | **46.67** | **100.00** |" in table
    episode = json.loads((out / "episodes" / "vt_1024" / "0.json").read_text())
    assert episode["ruler_score"] == 0.4 and episode["task"] == "vt" and episode["length"] == 1024
    assert (out / "transcripts" / "fwe_1024" / "1.txt").is_file()
    calls = len(engine.calls)
    assert calls == 8 * 2  # one memory turn (context < chunk) + one final turn per episode

    # a re-run finds every episode on disk and calls nothing
    again = answering_engine(tok, data_dir)
    res2 = asyncio.run(run_ruler_suite(_cfg(), again, tok, data_dir, out, lengths=None, tasks=None,
                                       max_samples=None))
    assert again.calls == [] and res2["by_task"] == by


def test_filters_and_max_samples(tmp_path, data_dir, tok):
    engine = answering_engine(tok, data_dir)
    res = asyncio.run(run_ruler_suite(_cfg(), engine, tok, data_dir, tmp_path / "o", lengths=[1024],
                                      tasks=["vt"], max_samples=1))
    assert list(res["by_task"]) == ["vt"] and res["by_task"]["vt"]["1024"]["finished"] == 1
    assert res["lengths"] == [1024]
    with pytest.raises(FileNotFoundError, match="missing ruler_cwe_1024.jsonl"):
        find_ruler_files(data_dir, [1024], ["cwe"])
    with pytest.raises(FileNotFoundError, match="memrl data ruler"):
        find_ruler_files(tmp_path, None, None)
    with pytest.raises(ValueError, match="max_samples"):
        asyncio.run(run_ruler_suite(_cfg(), engine, tok, data_dir, tmp_path / "o2", lengths=None, tasks=None,
                                    max_samples=0))


def test_failed_episodes_are_counted_apart_and_a_run_of_failures_stops(tmp_path, data_dir, monkeypatch):
    async def flaky(sample, engine, tokenizer, wcfg, *, sampling):
        if sample.index == 1:
            raise EngineError("HTTP 401: bad key")
        return Trajectory([], 1.0, "0", "0", metrics={"context_tokens": 5.0},
                          info={"final_text": "\\boxed{" + " ".join(sample.answers) + "}"})

    monkeypatch.setattr(ruler_suite, "build_workflow", lambda cfg: as_workflow(flaky))
    out = tmp_path / "out"
    res = asyncio.run(run_ruler_suite(_cfg(), None, None, data_dir, out, lengths=[1024], tasks=["vt"],
                                      max_samples=None))
    row = res["by_task"]["vt"]["1024"]
    assert (row["finished"], row["failed"], row["score"]) == (1, 1, 100.0)
    assert "1 failed" in (out / "results.md").read_text()
    assert "HTTP 401" in json.loads((out / "failures" / "vt_1024" / "1.json").read_text())["error"]

    async def broken(sample, engine, tokenizer, wcfg, *, sampling):
        raise EngineError("connection refused")

    monkeypatch.setattr(ruler_suite, "build_workflow", lambda cfg: as_workflow(broken))
    with pytest.raises(AllEpisodesFailedError, match="connection refused"):
        asyncio.run(run_ruler_suite(_cfg(), None, None, data_dir, tmp_path / "o3", lengths=[1024], tasks=["fwe"],
                                    max_samples=None))


def test_published_protocols_skip_empty_answers_and_round_as_ruler_general(tmp_path):
    """MemAgent's ruler_general.py leaves an empty response out (``if output == '': continue``) and reports
    ``round(sum(v) * 100 / len(v), 2)``; ReMemR1 has no RULER script and scores answers with MemAgent's code."""
    folder = tmp_path / "o" / "episodes" / ruler_suite._folder(("vt", 1024))
    folder.mkdir(parents=True)
    texts = ["\\boxed{x1}", "\\boxed{x1}", "", "no box: x1"]  # 1, 1, skipped, 0 under MemAgent's scoring
    for i, text in enumerate(texts):
        (folder / f"{i}.json").write_text(json.dumps({
            "metric": "string_match_all", "ruler_score": 0.0, "protocol": "unscored", "metrics": {},
            "info": {"final_text": text, "answers": ["x1"]}}))
    for protocol in ("memagent", "rememr1"):
        cfg = _cfg().model_copy(update={"eval": _cfg().eval.model_copy(update={"protocol": protocol})})
        row = ruler_suite.aggregate_ruler(cfg, tmp_path / "o", [("vt", 1024)])["by_task"]["vt"]["1024"]
        assert (row["score"], row["skipped_empty"], row["finished"]) == (66.67, 1, 4), protocol
    row = ruler_suite.aggregate_ruler(_cfg(), tmp_path / "o", [("vt", 1024)])["by_task"]["vt"]["1024"]
    assert (row["score"], row["skipped_empty"]) == (75.0, 0)  # memrl: the empty one is 0, the prose one counts
    counts = {0.0: 4, 0.25: 30, 0.33: 6, 0.5: 28, 0.67: 1, 0.75: 9, 1.0: 2}  # 2-decimal item scores, in order
    items = [v for v, k in counts.items() for _ in range(k)]
    from memrl.eval.report import percent

    assert percent(items) == round(sum(items) * 100 / len(items), 2) == 41.13  # fmean of 100*v: 41.12


def test_repeats_are_refused_with_the_ruler_suite(tmp_path, data_dir):
    from typer.testing import CliRunner

    from memrl.cli.main import app

    r = CliRunner().invoke(app, ["eval", "--suite", "ruler", "--model", "tiny", "--workflow", "memagent", "--data",
                                 str(data_dir), "--repeats", "3", "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "the RULER suite runs each sample once" in r.output, r.output
