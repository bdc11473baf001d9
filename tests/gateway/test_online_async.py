"""Online mode under ``trainer.mode: async``: staleness is bounded as for any asynchronous run.

An agent keeps one episode, after its first model call, until the trainer has stepped twice, then
rewards it: that episode's tokens are two policy versions old, more than max_staleness = 1. As in
AReaL its group trains all the same, counted in ``async/staleness_over``; with
``trainer.async.drop_stale`` the group is dropped (``async/dropped_stale``) and every other group trains.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest

from memrl import Trainer

KEY = "sk-rl-async-test"
AUTH = {"Authorization": f"Bearer {KEY}"}


def _agent(url: str, metrics: Path, stop: threading.Event, seen: list) -> None:
    """Run every episode handed out; hold the first one until two steps are logged."""
    with httpx.Client(timeout=60) as http:
        try:
            _episodes(http, url, metrics, stop, seen)
        except httpx.TransportError:  # the run finished and closed its endpoint
            pass


def _episodes(http: httpx.Client, url: str, metrics: Path, stop: threading.Event, seen: list) -> None:
    held = None
    while not stop.is_set():
        if held is not None and metrics.is_file() and len(metrics.read_text().splitlines()) >= 2:
            seen.append(http.post(held["reward_url"], headers=AUTH, json={"reward": 1.0}).status_code)
            held = None
        r = http.post(f"{url}/rl/episodes", headers=AUTH, json={"wait_s": 0.5})
        if r.status_code != 200:
            continue
        ep = r.json()
        call = http.post(f"{ep['base_url']}/completions", json={"prompt": ep["sample"]["q"], "max_tokens": 3},
                         headers={"Authorization": f"Bearer {ep['api_key']}"})
        if call.status_code != 200:  # the run finished and closed its episodes
            continue
        if not seen and held is None:
            held = ep
            continue
        reward = float(len(call.json()["choices"][0]["text"]) % 2)
        seen.append(http.post(ep["reward_url"], headers=AUTH, json={"reward": reward}).status_code)


@pytest.mark.parametrize("drop_stale", [False, True])
def test_a_held_episode_trains_late_or_is_dropped_as_stale(tmp_path: Path, monkeypatch, drop_stale: bool) -> None:
    monkeypatch.setenv("MEMRL_SESSION_KEY", KEY)
    run = tmp_path / "run"
    cfg = {"model": {"path": "tiny"}, "engine": {"device": "cpu"}, "algorithm": {"n": 2},
           "workflow": {"name": "agent", "options": {"mode": "online", "max_tokens": 3, "episode_timeout_s": 120}},
           "trainer": {"total_steps": 4, "prompts_per_step": 1, "lr": 1e-3, "output_dir": str(run), "mode": "async",
                       "async": {"max_staleness": 1, "drop_stale": drop_stale}}}
    trainer = Trainer(cfg, train=[{"q": "a"}, {"q": "b"}, {"q": "c"}])
    url = json.loads((run / "online.json").read_text())["url"]
    stop, seen = threading.Event(), []
    agent = threading.Thread(target=_agent, args=(url, run / "metrics.jsonl", stop, seen), daemon=True)
    agent.start()
    try:
        trainer.train()
    finally:
        stop.set()
        agent.join(timeout=30)
    steps = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    if drop_stale:
        assert sum(m.get("async/dropped_stale", 0) for m in steps) == 2  # the held episode's whole group
        assert all(m.get("async/staleness_mean", 0) <= 1 for m in steps)
    else:  # trained two versions late, with the sibling episode generated before the two steps
        assert sum(m.get("async/dropped_stale", 0) for m in steps) == 0
        assert sum(m.get("async/staleness_over", 0) for m in steps) == 2
    # every reward is accepted, but for an episode the agent was still running when the run ended and closed it
    # (410 Gone): under load the agent can take one more episode between the last step and the end of the run
    gone = seen.index(410) if 410 in seen else len(seen)
    assert set(seen[:gone]) == {200} and set(seen[gone:]) <= {410}, seen
    # 4 trained; with drop_stale the step whose only group was stale trained nothing
    assert max(m["step"] for m in steps) == (5 if drop_stale else 4)
    assert all(m["failed_episodes"] == 0 for m in steps)


def test_an_episode_no_agent_took_ends_at_once_when_the_run_stops(monkeypatch) -> None:
    """The stop's grace is for work in progress: a Ctrl-C before any agent connected waited trainer.stop_grace_s
    (30 s) for episodes nobody had taken, then filed each as a failure with a traceback."""
    import asyncio
    import time

    from memrl.gateway.online_run import _claimed_unless_stopping
    from memrl.train import signals
    from memrl.train.rollout import EpisodeStopped

    async def main() -> float:
        claimed: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        monkeypatch.setattr(signals, "_stop_at", [time.monotonic()])  # as the first SIGINT sets it
        start = time.perf_counter()
        with pytest.raises(EpisodeStopped, match="no agent had taken this episode"):
            await _claimed_unless_stopping(claimed)
        taken = asyncio.get_running_loop().create_future()
        taken.set_result(1.0)
        await _claimed_unless_stopping(taken)  # one already taken goes on (its grace applies later)
        return time.perf_counter() - start

    assert asyncio.run(main()) < 2
