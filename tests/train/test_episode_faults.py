"""Whatever an episode's code raises fails that episode only, printed as it is; stopping a run is bounded."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import time
from types import SimpleNamespace

import pytest
from rich.console import Console

from memrl.train import signals
from memrl.train.guards import NothingTrainableError
from memrl.train.rollout import RolloutRunner, one_line
from memrl.train.sampler import ResumableSampler
from memrl.train.signals import StopRequest
from memrl.train.trainer import Trainer
from tests.train.helpers import config
from tests.train.test_run_guards import failing_engine


def run_failing(tmp_path, exc: BaseException) -> tuple[str, NothingTrainableError]:
    out = io.StringIO()
    trainer = Trainer(config(tmp_path, trainer__total_steps=3, trainer__max_failed_steps=1), engine=failing_engine(exc),
                      tracker_console=Console(file=out, width=400))
    with pytest.raises(NothingTrainableError) as err:
        trainer.run()
    return out.getvalue(), err.value


def test_an_error_text_with_brackets_is_printed_as_it_is(tmp_path):
    printed, err = run_failing(tmp_path, RuntimeError("[INST] 2+2 [/INST]"))  # rich would read a closing tag
    assert "episode of sample" in printed and "RuntimeError: [INST] 2+2 [/INST]" in printed
    assert "last error: RuntimeError: [INST] 2+2 [/INST]" in printed and "[/INST]" in str(err)


@pytest.mark.parametrize("exc,name", [(SystemExit(3), "SystemExit: 3"), (KeyboardInterrupt(), "KeyboardInterrupt"),
                                      (asyncio.CancelledError(), "CancelledError")])
def test_code_that_stops_itself_fails_its_episode_only(tmp_path, exc, name):
    printed, err = run_failing(tmp_path, exc)
    assert f"every episode failed (last error: {name})" in str(err)
    files = sorted((tmp_path / "run" / "failures").iterdir())
    assert len(files) == 8  # prompts_per_step 2 x n 4, one traceback each
    assert all(f.read_text().count("Traceback (most recent call last)") == 1 for f in files)


def test_a_restart_keeps_its_own_tracebacks_beside_a_full_folder(tmp_path, monkeypatch):
    """A run that failed before (the folder at the cap) and fails again still shows this attempt's tracebacks."""
    monkeypatch.setattr("memrl.train.rollout.MAX_FAILURE_FILES", 10)
    old = tmp_path / "run" / "failures"
    old.mkdir(parents=True)
    for i in range(10):
        (old / f"old{i}.txt").write_text("an earlier attempt")
    printed, _ = run_failing(tmp_path, RuntimeError("still broken"))
    new = [f for f in old.iterdir() if f.name.startswith("step")]
    assert len(new) == 8 and all("still broken" in f.read_text() for f in new)
    assert "(traceback: " in printed


def test_tracebacks_stop_at_the_cap_within_one_invocation(tmp_path, monkeypatch):
    monkeypatch.setattr("memrl.train.rollout.MAX_FAILURE_FILES", 3)
    run_failing(tmp_path, RuntimeError("broken"))
    assert len(list((tmp_path / "run" / "failures").iterdir())) == 3


class Sleeps:
    """A workflow whose episodes hang (an agent waiting on a tool that never answers)."""

    async def episode(self, sample, **kw):
        await asyncio.sleep(3600)


def runner(tmp_path, grace: float) -> tuple[RolloutRunner, list[str]]:
    cfg = SimpleNamespace(trainer=SimpleNamespace(seed=0, stop_grace_s=grace, output_dir=str(tmp_path)),
                          sampling=SimpleNamespace(temperature=1.0, top_p=1.0, top_k=-1))
    said: list[str] = []
    return RolloutRunner(cfg, Sleeps(), [{}], ResumableSampler(1, 0), None, said.append), said


def test_a_cancelled_episode_is_not_a_failure(tmp_path):
    run, said = runner(tmp_path, 30)

    async def main():
        task = asyncio.ensure_future(run.episode(0, 0, step=1, round_=0))
        await asyncio.sleep(0.1)
        task.cancel()  # Ctrl-C under asyncio.run, or the run stopping
        await task

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(main())
    assert run.failed_episodes == 0 and not said


def test_a_stop_request_ends_hung_episodes_after_the_grace_period(tmp_path, monkeypatch):
    run, said = runner(tmp_path, 0.5)
    monkeypatch.setattr(signals, "_stop_at", [time.monotonic()])  # as the first SIGTERM sets it
    start = time.perf_counter()
    assert asyncio.run(run.episode(0, 0, step=1, round_=0)) is None
    assert time.perf_counter() - start < 5 and run.failed_episodes == 1
    assert "EpisodeStopped: the run is stopping and this episode was still running 0.5 s later " \
           "(trainer.stop_grace_s)" in said[0]
    assert not (tmp_path / "failures").exists()  # a stop's cut is not a failure worth a traceback file


def test_the_first_signal_says_how_long_running_episodes_may_take(capfd):
    with StopRequest(12) as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)
        assert stop.signum == signal.SIGTERM and signals.stop_requested_at() is not None
    assert signals.stop_requested_at() is None
    err = capfd.readouterr().err
    assert "SIGTERM: finishing the current step (episodes still running in 12 s are failed: trainer.stop_grace_s)" \
           in err


def test_one_line_keeps_the_first_and_last_lines():
    exc = RuntimeError("command 'a' exited with status 3; stderr:\nfirst\nlast")
    assert one_line(exc) == "RuntimeError: command 'a' exited with status 3; stderr: ... last"


def test_the_same_failure_is_printed_once_a_step_with_a_count(tmp_path):
    printed, _ = run_failing(tmp_path, RuntimeError("no field 'word'"))
    assert printed.count("failed (workflow memagent): RuntimeError: no field 'word'") == 1
    assert "... and 7 more episode(s) failed with the same error" in printed
    assert len(list((tmp_path / "run" / "failures").iterdir())) == 8  # every traceback is still kept


def test_a_step_the_stop_cut_short_is_not_trained_and_the_resumed_run_does_it_again(tmp_path):
    """Episodes outliving trainer.stop_grace_s: the step is dropped (no idle step, no update, data position
    back where it began), step 1's checkpoint stands, and the resumed run draws step 2's samples again."""
    import json

    from memrl.models.resolve import load_tokenizer
    from memrl.testing import ScriptedEngine
    from memrl.train.signals import TrainingInterrupted
    from tests.train.helpers import coin_engine

    class HangsAtStep2(ScriptedEngine):
        async def generate(self, prompt_ids, params):
            if trainer.step == 2:
                if not sent:
                    sent.append(os.kill(os.getpid(), signal.SIGINT))  # the user's Ctrl-C, mid-step
                await asyncio.sleep(3600)  # an agent that never answers
            return await super().generate(prompt_ids, params)

    sent: list = []
    tok = load_tokenizer("tiny")
    cfg = config(tmp_path, trainer__total_steps=3, trainer__stop_grace_s=0.3)
    out = io.StringIO()
    trainer = Trainer(cfg, engine=HangsAtStep2(coin_engine(tok).reply), tracker_console=Console(file=out, width=400))
    with pytest.raises(TrainingInterrupted) as err:
        trainer.run()
    assert err.value.step == 1 and "step 2: the stop cut 8 episode(s) short" in out.getvalue()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1] and rows[0]["data_position"] == 2
    state = json.loads(next((tmp_path / "run" / "checkpoints").glob("step_*1/state.json")).read_text())
    assert state["data_position"] == 2 and not state.get("idle_steps")
    resumed = Trainer(cfg, engine=coin_engine(tok))
    resumed.run()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["data_position"]) for r in rows] == [(1, 2), (2, 4), (3, 6)]
    assert not any(r.get("idle_steps") for r in rows)


def test_a_sampled_eval_seeds_its_episodes_by_step_sample_and_repeat(tmp_path):
    from memrl.models.resolve import load_tokenizer
    from memrl.testing import ScriptedEngine
    from memrl.train.rollout import evaluate_samples
    from memrl.workflows import build_workflow, load_samples
    cfg = config(tmp_path, trainer__eval={"every": 1, "n": 2, "temperature": 1.0})
    tok = load_tokenizer("tiny")
    seen: list[int] = []

    class Recording(ScriptedEngine):
        async def generate(self, prompt_ids, params):
            seen.append(params.seed)
            return await super().generate(prompt_ids, params)

    def by_seed(prompt, params):  # what a seeded engine does: the draw follows from the seed
        return tok.encode("\\boxed{" + "bc"[params.seed % 2] + "}", add_special_tokens=False) + [tok.eos_token_id]

    eng = Recording(by_seed)
    wf, samples = build_workflow(cfg), load_samples(cfg, "train")[:2]
    first = [asyncio.run(evaluate_samples(cfg, wf, samples, eng, tok, step=s)) for s in (4, 4, 5)]
    per_run = len(seen) // 3
    runs = [sorted(seen[i * per_run:(i + 1) * per_run]) for i in range(3)]
    assert None not in seen and runs[0] == runs[1] != runs[2]  # the same step draws the same; another step not
    assert len(set(runs[0])) >= 4 and first[0] == first[1]  # 2 samples x 2 repeats, each its own seed


def test_a_stop_abandons_a_hung_eval_after_the_grace_period(tmp_path, monkeypatch):
    from memrl import Episode, Workflow
    from memrl.train.rollout import EvalStopped, evaluate_samples

    class Hangs(Workflow):
        async def run(self, ep: Episode) -> None:
            await asyncio.sleep(3600)  # an agent waiting on a tool that never answers

    cfg = config(tmp_path, trainer__stop_grace_s=0.3)
    monkeypatch.setattr(signals, "_stop_at", [time.monotonic()])  # as the first SIGTERM sets it
    start = time.perf_counter()
    with pytest.raises(EvalStopped, match=r"still running 0.3 s later \(trainer.stop_grace_s\)"):
        asyncio.run(evaluate_samples(cfg, Hangs(), [{}, {}], None, None))
    assert time.perf_counter() - start < 5


def test_each_rollout_mode_says_whether_a_cut_step_is_redone():
    from memrl.train import sources

    assert sources.SyncRollout.redoes_cut_steps is True  # its step's samples are drawn again on resume
    assert sources.AsyncRollout.redoes_cut_steps is False  # trains what finished, as with failed episodes
