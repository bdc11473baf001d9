"""A failed episode is a failure, not a wrong answer: counted apart, retried, and fatal when nothing works."""

import asyncio
import json

import pytest

from memrl.config import MemRLConfig
from memrl.engines.base import EngineDeadError, EngineError
from memrl.eval import runner
from memrl.eval.report import markdown_table, summarize
from memrl.types import Trajectory
from memrl.workflows.registry import as_workflow
from tests.eval.helpers import needle_eval_dir


def _cfg(concurrency: int = 1) -> MemRLConfig:
    return MemRLConfig.model_validate({"model": {"path": "fake"}, "engine": {"concurrency": concurrency}})


class FakeWorkflow:
    """Stands in for memagent: answers right, or raises what ``behaviour[index]`` says."""

    def __init__(self, behaviour=None):
        self.behaviour = behaviour or {}
        self.calls: list[int] = []

    async def __call__(self, sample, engine, tokenizer, wcfg, *, sampling):
        self.calls.append(sample.index)
        what = self.behaviour.get(sample.index)
        if what == "hang":
            await asyncio.Event().wait()
        if isinstance(what, BaseException):
            raise what
        m = {"em": 1.0, "sub_em": 1.0, "f1": 1.0, "answered": 1.0, "context_tokens": 10.0, "num_conversations": 2.0}
        return Trajectory([], 1.0, str(sample.index), str(sample.index), metrics=m,
                          info={"question": sample.question, "answers": sample.answers, "answer": sample.answers[0]})


def _run(tmp_path, wf, monkeypatch, concurrency=1, **kw):
    monkeypatch.setattr(runner, "build_workflow", lambda cfg: as_workflow(wf))
    return asyncio.run(runner.run_eval(_cfg(concurrency), None, None, tmp_path / "data", [3], tmp_path / "out", **kw))


def test_failures_are_counted_apart_and_retried(tmp_path, monkeypatch):
    needle_eval_dir(tmp_path / "data")
    out = tmp_path / "out"
    wf = FakeWorkflow({1: EngineError("HTTP 401 from http://x/v1/completions: bad key")})
    res = _run(tmp_path, wf, monkeypatch)["by_docs"]["3"]
    assert (res["finished"], res["failed"], res["samples"]) == (3, 1, 4)
    assert res["sub_em"] == 100.0  # over the 3 finished episodes; the failure is not a wrong answer
    assert not (out / "episodes" / "3" / "1.json").exists()
    failure = json.loads((out / "failures" / "3" / "1.json").read_text())
    assert "HTTP 401" in failure["error"]
    transcript = (out / "transcripts" / "3" / "1.txt").read_text()
    assert "EngineError: HTTP 401" in transcript and "not scored" in transcript
    table = markdown_table(json.loads((out / "results.json").read_text()))
    assert "| 3 | 10 | 3 | 1 | 100.00 |" in table and "1 failed episode(s) are not counted" in table

    # the next run retries exactly the failed episode, and it no longer counts as failed
    wf = FakeWorkflow()
    seen = []
    res = _run(tmp_path, wf, monkeypatch, on_start=lambda total, done: seen.append((total, done)))["by_docs"]["3"]
    assert seen == [(4, 3)] and wf.calls == [1]
    assert (res["finished"], res["failed"]) == (4, 0)
    assert not (out / "failures" / "3" / "1.json").exists()


def test_a_run_where_everything_failed_stops_with_an_error(tmp_path, monkeypatch):
    needle_eval_dir(tmp_path / "data")
    wf = FakeWorkflow({i: EngineError("HTTP 401") for i in range(4)})
    with pytest.raises(runner.AllEpisodesFailedError, match="all 4 episodes of this run failed; the first: .*401"):
        _run(tmp_path, wf, monkeypatch)
    res = json.loads((tmp_path / "out" / "results.json").read_text())["by_docs"]["3"]
    assert (res["finished"], res["failed"], res["sub_em"]) == (0, 4, None)
    assert "| 3 | - | 0 | 4 | - |" in markdown_table({"workflow": "w", "model": "m", "by_docs": {"3": res}})


def test_a_dead_engine_stops_the_run_at_once_and_keeps_what_finished(tmp_path, monkeypatch):
    needle_eval_dir(tmp_path / "data")
    out = tmp_path / "out"
    wf = FakeWorkflow({1: EngineDeadError("the vLLM engine process exited")})
    with pytest.raises(EngineDeadError):
        _run(tmp_path, wf, monkeypatch)
    assert wf.calls == [0, 1]  # nothing started after the engine died
    assert (out / "episodes" / "3" / "0.json").is_file()
    assert not (out / "failures" / "3").exists()  # not the episode's fault: simply redone next time
    assert json.loads((out / "results.json").read_text())["by_docs"]["3"]["finished"] == 1

    # with episodes in flight, they are cancelled rather than awaited
    wf = FakeWorkflow({2: "hang", 3: EngineDeadError("gone")})
    with pytest.raises(EngineDeadError):
        _run(tmp_path, wf, monkeypatch, concurrency=4)


def test_failures_saved_as_episodes_by_older_versions_are_retried(tmp_path, monkeypatch):
    needle_eval_dir(tmp_path / "data")
    _run(tmp_path, FakeWorkflow(), monkeypatch)
    legacy = tmp_path / "out" / "episodes" / "3" / "2.json"
    legacy.write_text(json.dumps({"docs": 3, "error": "EngineError: HTTP 401", "metrics": {"sub_em": 0.0}}))
    wf = FakeWorkflow()
    _run(tmp_path, wf, monkeypatch)
    assert wf.calls == [2] and json.loads(legacy.read_text())["metrics"]["sub_em"] == 1.0


@pytest.mark.parametrize("k", [0, -1])
def test_max_samples_must_be_positive(tmp_path, monkeypatch, k):
    needle_eval_dir(tmp_path / "data")
    with pytest.raises(ValueError, match="max_samples must be >= 1"):
        _run(tmp_path, FakeWorkflow(), monkeypatch, max_samples=k)


def test_summary_of_nothing_finished_has_no_accuracy():
    s = summarize([], failed=2)
    assert s["samples"] == 2 and s["finished"] == 0 and s["sub_em"] is None and s["seconds_per_episode"] is None
