"""Asynchronous training (trainer.mode=async): η = 0 is the synchronous trainer; η ≥ 1 overlaps; versions; resume."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter

import pytest
import torch
import yaml

from memrl.engines.base import GenerationResult, SamplingParams
from memrl.train.sampler import ResumableSampler
from memrl.train.trainer import Trainer
from memrl.train.versioned import PolicyClock, VersionedEngine, WeightGate
from tests.train.helpers import config, write_task

KEYS = ("reward", "pg_loss", "grad_norm", "entropy", "train_rows", "response_tokens")


def _run(cfg):
    trainer = Trainer(cfg)
    steps = []
    try:
        for _ in range(cfg.trainer.total_steps):
            trainer.step += 1
            steps.append(trainer.train_step())
    finally:
        if trainer.producer is not None:
            trainer.producer.close()
    return trainer, steps


def test_async_with_zero_staleness_equals_the_synchronous_trainer(tmp_path):
    over = {"algorithm__entropy_coef": 0.05, "trainer__total_steps": 2, "sampling__temperature": 1.0}
    sync, s_steps = _run(config(tmp_path / "sync", **over))
    asyn, a_steps = _run(config(tmp_path / "async", trainer__mode="async", trainer__max_staleness=0, **over))
    assert not asyn.shared_engine  # the engine generates with a copy of its own
    for s, a in zip(s_steps, a_steps):
        for key in KEYS:
            assert a[key] == pytest.approx(s[key], rel=1e-5, abs=1e-7), key
        assert a["async/dropped_stale"] == 0 and a["async/staleness_0"] == a["rollout_episodes"]
    for (name, p), q in zip(sync.policy.named_parameters(), asyn.policy.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
    # the engine's copy received the update: it holds the policy's weights
    engine_state = asyn.engine.model.state_dict()
    for name, p in asyn.policy.named_parameters():
        torch.testing.assert_close(engine_state[name], p.detach(), msg=name)


def test_async_overlaps_and_bounds_staleness(tmp_path):
    cfg = config(tmp_path, trainer__mode="async", trainer__max_staleness=1, trainer__total_steps=3,
                 trainer__partial_chunk_tokens=2, algorithm__entropy_coef=0.05)
    trainer, steps = _run(cfg)
    lags = Counter()
    for m in steps:
        assert m["train_rows"] > 0 and 0 <= m["async/producer_idle"] <= 1
        lags.update({0: m["async/staleness_0"], 1: m["async/staleness_1"]})
        assert "async/staleness_2" not in m
    assert lags[1] > 0  # some episodes were generated while an update ran (one version behind)
    # records: every trained episode carries the version of each piece it generated
    trajs = trainer.step_trajectories
    assert trajs and all(t.info["policy_versions"] for t in trajs)
    for t in trajs:
        pieces = t.info["policy_versions"]
        assert sum(n for n, _ in pieces) == t.num_generated_tokens
        assert trainer.step - 1 - min(v for _, v in pieces) <= 1


class _Counting:
    """Greedy 'engine' that emits prompt-dependent tokens, one per position, and stops at token 0."""

    def __init__(self, stop_after: int) -> None:
        self.stop_after = stop_after
        self.calls: list[int] = []

    async def generate(self, prompt_ids, params: SamplingParams) -> GenerationResult:
        self.calls.append(len(prompt_ids))
        out: list[int] = []
        pos = len(prompt_ids)
        while len(out) < params.max_new_tokens:
            tok = 0 if pos >= self.stop_after else pos + 100
            out.append(tok)
            pos += 1
            if tok in params.stop_token_ids:
                return GenerationResult(out, [-0.5] * len(out), "stop")
        return GenerationResult(out, [-0.5] * len(out), "length")


def test_interrupted_generation_continues_exactly_from_the_tokens_so_far():
    async def go():
        whole = await _Counting(13).generate([1, 2, 3], SamplingParams(max_new_tokens=20, stop_token_ids=(0,)))
        engine = _Counting(13)
        clock = PolicyClock(4)
        view = VersionedEngine(engine, WeightGate(), clock, chunk=4)
        res = await view.generate([1, 2, 3], SamplingParams(max_new_tokens=20, stop_token_ids=(0,)))
        return whole, res, engine.calls, view.segments

    whole, res, calls, segments = asyncio.run(go())
    assert res.token_ids == whole.token_ids and res.finish_reason == "stop" == whole.finish_reason
    assert calls == [3, 7, 11]  # each piece's prompt is the prompt plus everything generated so far
    assert segments == [[4, 4], [4, 4], [3, 4]]


def test_a_weight_update_waits_for_pieces_in_flight_and_new_pieces_wait_for_it():
    async def go():
        gate, clock, log = WeightGate(), PolicyClock(0), []
        engine = _Counting(10**6)
        view = VersionedEngine(engine, gate, clock, chunk=2)

        async def slow_generate(prompt, params):
            log.append(("piece", clock.version))
            await asyncio.sleep(0.01)
            return await _Counting.generate(engine, prompt, params)

        engine.generate = slow_generate  # type: ignore[method-assign]

        async def update():
            await asyncio.sleep(0.015)  # lands while the second piece runs
            async with gate.update():
                log.append(("update", clock.version))
                clock.version = 1

        res, _ = await asyncio.gather(view.generate([5], SamplingParams(max_new_tokens=8)), update())
        return log, view.segments, res

    log, segments, res = asyncio.run(go())
    assert log == [("piece", 0), ("piece", 0), ("update", 0), ("piece", 1), ("piece", 1)]
    assert segments == [[2, 0], [2, 0], [2, 1], [2, 1]] and len(res.token_ids) == 8


class _Interruptible:
    """Counts up one token per 10 ms; ``interrupt()`` makes every request in flight return what it has."""

    def __init__(self, abort_at: int | None = None) -> None:
        self.cut = asyncio.Event()
        self.abort_at = abort_at  # a request that aborts by itself (an engine failure) after this many tokens

    def interrupt(self) -> None:
        self.cut.set()

    async def generate(self, prompt, params):
        out = []
        while len(out) < params.max_new_tokens:
            if self.cut.is_set() or len(out) == self.abort_at:
                self.cut.clear()
                return GenerationResult(out, [-0.5] * len(out), "abort")
            await asyncio.sleep(0.01)
            out.append(prompt[-1] + len(out) + 1)
        return GenerationResult(out, [-0.5] * len(out), "length")


def test_an_update_cuts_pieces_short_on_an_engine_that_can_interrupt():
    async def go():
        engine = _Interruptible()
        gate, clock, held = WeightGate(engine.interrupt), PolicyClock(0), []
        view = VersionedEngine(engine, gate, clock, chunk=32)

        async def update():
            await asyncio.sleep(0.035)  # ~3 tokens into the 10-token call
            t0 = time.perf_counter()
            async with gate.update():
                held.append(time.perf_counter() - t0)
                clock.version = 1

        res, _ = await asyncio.gather(view.generate([5], SamplingParams(max_new_tokens=10)), update())
        return res, view, gate, held

    res, view, gate, held = asyncio.run(go())
    first = view.segments[0][0]
    assert 1 <= first <= 5 and held[0] < 0.02  # the update did not wait for the other tokens
    assert view.segments == [[first, 0], [10 - first, 1]] and view.interrupted == 1 and gate.interrupts == 1
    assert res.token_ids == [6 + i for i in range(first)] + [5 + first + 1 + i for i in range(10 - first)]
    assert res.finish_reason == "length" and len(res.logprobs) == 10


def test_an_abort_the_gate_did_not_cause_is_returned_as_it_is():
    async def go():
        view = VersionedEngine(_Interruptible(abort_at=3), WeightGate(), PolicyClock(0), chunk=32)
        return await view.generate([5], SamplingParams(max_new_tokens=10)), view

    res, view = asyncio.run(go())
    assert res.finish_reason == "abort" and res.token_ids == [6, 7, 8] and view.interrupted == 0


def _write_async_config(tmp, name):
    cfg = {
        "model": {"path": "tiny"},
        "data": {"train_file": str(write_task(tmp / "train.jsonl"))},
        "workflow": {"chunk_tokens": 32, "memory_tokens": 3, "final_tokens": 4, "reward": "em"},
        "algorithm": {"n": 2, "entropy_coef": 0.05},
        "trainer": {"lr": 1e-2, "total_steps": 6, "prompts_per_step": 2, "save_every": 1, "seed": 5,
                    "output_dir": str(tmp / name), "mode": "async", "max_staleness": 1,
                    "rollouts_per_step": 4},  # every episode of a step (2 prompts x 2) is recorded
        "engine": {"device": "cpu"},
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_async_sigkill_then_resume_neither_loses_nor_repeats_a_sample(tmp_path):
    cmd = [sys.executable, "-m", "memrl.cli.main", "train", str(_write_async_config(tmp_path, "run"))]
    run = tmp_path / "run"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    metrics = run / "metrics.jsonl"
    while time.time() < deadline and not (metrics.is_file() and len(metrics.read_text().splitlines()) >= 3):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(metrics.read_text().splitlines()) < 6, "the run finished before it could be killed"
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "resumed from step" in r.stderr
    steps = [json.loads(x)["step"] for x in metrics.read_text().splitlines()]
    assert steps[-1] == 6 and sorted(set(steps)) == [1, 2, 3, 4, 5, 6]
    trained: Counter[int] = Counter()
    for step in range(1, 7):  # a step redone after the resume overwrote its records
        for line in (run / "rollouts" / f"step_{step:06d}.jsonl").read_text().splitlines():
            rec = json.loads(line)
            trained[int(rec["sample_id"])] += 1
    state = json.loads((run / "checkpoints" / "step_000006" / "state.json").read_text())
    drawn = ResumableSampler(12, 5).take(state["data_position"])
    # each group's 2 episodes were trained once; what was drawn but not trained is pending in the checkpoint
    assert Counter({i: c // 2 for i, c in trained.items()}) + Counter(state.get("pending", [])) == Counter(drawn)
    assert all(c % 2 == 0 for c in trained.values())


class _Slow:
    """An engine that takes ``delay`` seconds per call: episodes finish well after the trainer asks for them."""

    def __init__(self, engine, delay: float) -> None:
        self.engine = engine
        self.delay = delay

    def __getattr__(self, name):
        return getattr(self.engine, name)

    async def generate(self, prompt_ids, params):
        await asyncio.sleep(self.delay)
        return await self.engine.generate(prompt_ids, params)


def _busy(producer) -> bool:
    with producer.lock:
        return bool(producer.running) or producer._can_submit()


def test_every_async_step_logs_the_reward_of_the_episodes_it_trained(tmp_path):
    """A step whose groups were all complete before the previous step ended finishes nothing new; it used to
    log no reward, and ``memrl train`` then called a run that trained every step a failure."""
    from memrl.models.resolve import load_tokenizer
    from tests.train.helpers import coin_engine

    cfg = config(tmp_path, trainer__mode="async", trainer__max_staleness=2, trainer__total_steps=3,
                 algorithm__off_policy="decoupled")
    trainer = Trainer(cfg, engine=_Slow(coin_engine(load_tokenizer("tiny"), seed=1), 0.1))
    steps = []
    try:
        for step in range(1, 4):
            trainer.step = step
            steps.append(trainer.train_step())
            trained = trainer.step_trajectories
            assert steps[-1]["reward"] == pytest.approx(statistics.fmean(t.reward for t in trained))
            deadline = time.time() + 60  # after step 1: let the producer finish all it may generate
            while step == 1 and _busy(trainer.producer) and time.time() < deadline:
                time.sleep(0.01)
    finally:
        trainer.producer.close()
    # step 3's groups were complete before step 2 ended, and the groups step 2 released take >= 0.3 s
    assert steps[2]["rollout_episodes"] == 0 and "reward_finished" not in steps[2]
    assert steps[1]["rollout_episodes"] > 0 and 0 <= steps[1]["reward_finished"] <= 1
    assert all(m["train_rows"] > 0 for m in steps)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_step_logs_its_wall_time_covering_its_parts(tmp_path, mode):
    """``time/step`` (what steady-state throughput over steps 2..N is measured with) spans the whole step."""
    over = {"trainer__total_steps": 2, "trainer__mode": mode}
    if mode == "async":
        over["trainer__max_staleness"] = 1
    cfg = config(tmp_path, **over)
    Trainer(cfg).run()
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "train_tokens" in r]
    assert len(rows) == 2
    for r in rows:
        parts = sum(r[k] for k in ("time/rollout", "time/logprob", "time/update", "time/sync"))
        assert 0 < parts <= r["time/step"] + 1e-6


def _seeded_engine(tok):
    """Answers from the episode's seed alone (whatever the order episodes run in): even samples always wrong
    (uniform groups, which dynamic sampling drops), odd ones right or wrong by the seed."""
    import random

    from memrl.testing import ScriptedEngine

    def reply(prompt, params):
        if params.max_new_tokens != 6:
            return [tok.eos_token_id]
        idx = int(tok.decode(prompt).split("Which letter ")[1].split("?")[0])
        right = "c" if idx % 2 else "b"
        ans = right if idx % 2 and random.Random(params.seed).random() < 0.5 else "z"
        return tok.encode("\\boxed{" + ans + "}", add_special_tokens=False) + [tok.eos_token_id]

    return ScriptedEngine(reply)


def test_an_async_dynamic_sampling_run_resumes_as_if_never_stopped(tmp_path):
    """η = 0 with dynamic sampling: the resumed producer continues the checkpointed one (its slots, the steps and
    seeds of its unfinished groups), so the run ends where the run never stopped ends (it re-seeded them)."""
    from memrl.models.resolve import load_tokenizer

    tok = load_tokenizer("tiny")
    over = {"trainer__mode": "async", "trainer__max_staleness": 0, "algorithm__dynamic_sampling": True,
            "algorithm__max_gen_batches": 3, "trainer__save_every": 1, "data__shuffle": False}

    def train(out, steps):
        cfg = config(tmp_path / out, trainer__total_steps=steps, **over)
        cfg.trainer.output_dir = str(tmp_path / "runs" / out)
        trainer = Trainer(cfg, engine=_seeded_engine(tok))
        trainer.run()
        return trainer

    whole = train("whole", 4)
    train("cut", 2)
    state = json.loads((tmp_path / "runs" / "cut" / "checkpoints" / "step_000002" / "state.json").read_text())
    assert state["producer"]["slots"] >= 4 and state["producer"]["start_version"] == 0
    resumed = train("cut", 4)
    assert resumed.resumed_from == 2
    for (name, p), q in zip(whole.policy.named_parameters(), resumed.policy.parameters()):
        assert torch.equal(p, q), name
    rows = {n: [json.loads(x) for x in (tmp_path / "runs" / n / "metrics.jsonl").read_text().splitlines()]
            for n in ("whole", "cut")}
    assert [r["reward"] for r in rows["cut"]] == [r["reward"] for r in rows["whole"]]


def test_a_resumed_producer_slow_to_start_still_fills_the_first_step(tmp_path, monkeypatch):
    """The checkpointed producer may have used its whole submission budget: its unfinished groups are then
    resubmitted before anything new. The trainer asking before the producer's thread moved them took "all the
    producer may generate now" as nothing, and the first resumed step trained nothing."""
    import memrl.train.async_rollout as AR

    over = {"trainer__mode": "async", "trainer__max_staleness": 1, "trainer__save_every": 1}
    cfg = config(tmp_path, trainer__total_steps=3, **over)
    Trainer(cfg).run()
    real = AR.AsyncRollout._produce

    async def late(self):
        await asyncio.sleep(0.5)
        await real(self)

    monkeypatch.setattr(AR.AsyncRollout, "_produce", late)
    trainer = Trainer(config(tmp_path, trainer__total_steps=5, **over))
    last = trainer.run()
    assert trainer.resumed_from == 3 and "idle_steps" not in last and trainer.step == 5
