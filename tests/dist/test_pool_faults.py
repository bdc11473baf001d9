"""RayEnginePool under faults, on a fake Ray (tests/dist/fake_ray.py): every replica call is bounded, a replacement
the cluster has no room for is given up (the run goes on with the others, or stops in one line), and a replica
that keeps failing is restarted, then stops the run in one line. A request that fails on every replica is its
own fault and counts against none."""

from __future__ import annotations

import asyncio
import time

import pytest

from memrl.dist.replicas import ReplicaHealth
from memrl.engines.base import EngineDeadError, SamplingParams
from tests.dist.fake_ray import FakeRay, fake_pool

PARAMS = SamplingParams(max_new_tokens=4)


def calls(pool, n: int, prompt=(1, 2)) -> list:
    async def go():
        return await asyncio.gather(*(pool.generate(list(prompt), PARAMS) for _ in range(n)), return_exceptions=True)

    return asyncio.run(go())


def test_a_replica_that_fails_every_call_is_restarted_and_no_episode_is_lost(monkeypatch):
    fake = FakeRay(lambda slot, n: "broken" if (slot, n) == (0, 0) else "ok")  # the restarted one is fine
    warnings: list[str] = []
    pool = fake_pool(monkeypatch, fake, 4, warn=warnings.append)
    results = calls(pool, 40)
    assert all(not isinstance(r, BaseException) for r in results)  # each failed request was answered elsewhere
    assert pool.restarts == 1 and fake.incarnations[0] == 1 and fake.spawned[0] in fake.killed
    assert any("rollout replica 0 failed" in w and "restarting it" in w for w in warnings)
    assert pool.stats()["replicas"] == 4


def test_a_replica_that_keeps_failing_after_restarts_stops_the_run_in_one_line(monkeypatch):
    fake = FakeRay(lambda slot, n: "broken" if slot == 0 else "ok")
    pool = fake_pool(monkeypatch, fake, 4, warn=lambda m: None, health=ReplicaHealth(0.5, 4, max_restarts=2))
    with pytest.raises(EngineDeadError) as err:
        for _ in range(20):
            for r in calls(pool, 8):
                if isinstance(r, BaseException):
                    raise r
    message = str(err.value)
    assert "\n" not in message and "rollout replica 0 failed 4 of its last 4 requests after 2 restart(s)" in message
    assert "CUDA error" in message and fake.incarnations[0] == 2


def test_a_request_that_fails_everywhere_counts_against_no_replica(monkeypatch):
    fake = FakeRay(lambda slot, n: "ok")
    pool = fake_pool(monkeypatch, fake, 3, warn=lambda m: None)
    results = calls(pool, 12, prompt=(666,))  # every replica refuses this request
    assert all(isinstance(r, RuntimeError) and "CUDA error" in str(r) for r in results)
    assert pool.restarts == 0 and pool.slots.failures == [0, 0, 0]
    assert all(isinstance(r, list) is False for r in calls(pool, 3))  # the pool still answers


@pytest.mark.timeout(30)
def test_a_hung_replica_call_times_out_and_goes_to_another_replica(monkeypatch):
    fake = FakeRay(lambda slot, n: "hung" if slot == 0 else "ok")
    pool = fake_pool(monkeypatch, fake, 2, call_timeout_s=0.3, warn=lambda m: None)
    t0 = time.monotonic()
    results = calls(pool, 4)
    assert time.monotonic() - t0 < 5
    assert [r.token_ids for r in results] == [[1]] * 4  # answered by replica 1


@pytest.mark.timeout(30)
def test_a_single_hung_replica_fails_the_call_within_its_timeout(monkeypatch):
    fake = FakeRay(lambda slot, n: "hung")
    pool = fake_pool(monkeypatch, fake, 1, call_timeout_s=0.2, timeout_per_token_s=0.05, warn=lambda m: None)
    t0 = time.monotonic()
    (result,) = calls(pool, 1)
    assert isinstance(result, TimeoutError) and "did not answer within 0.4 s" in str(result)
    assert time.monotonic() - t0 < 5


@pytest.mark.timeout(30)
def test_no_room_for_a_replacement_goes_on_with_the_other_replicas(monkeypatch):
    fake = FakeRay(lambda slot, n: "dead" if slot == 0 else "ok", free={"CPU": 0.0})  # the lost node's CPUs
    warnings: list[str] = []
    pool = fake_pool(monkeypatch, fake, 2, warn=warnings.append)
    results = calls(pool, 6)
    assert [r.token_ids for r in results] == [[1]] * 6
    assert fake.incarnations[0] == 0  # no replacement was started: it could not be placed
    assert pool.stats()["replicas"] == 1
    assert warnings == ["rollout replica 0 could not be replaced (it died; the cluster has no free 1 CPU for a new "
                        "one); going on with 1 replica(s)"]
    asyncio.run(pool.update_weights({}))  # weight sync goes to the live replica only, and ends


@pytest.mark.timeout(30)
def test_a_replacement_that_never_starts_is_given_up(monkeypatch):
    fake = FakeRay(lambda slot, n: {0: "dead", 1: "unscheduled"}[n] if slot == 0 else "ok")
    warnings: list[str] = []
    pool = fake_pool(monkeypatch, fake, 2, replace_timeout_s=0.3, warn=warnings.append)
    t0 = time.monotonic()
    results = calls(pool, 4)
    assert time.monotonic() - t0 < 5 and [r.token_ids for r in results] == [[1]] * 4
    assert "its replacement was not running after 0.3 s" in warnings[0] and fake.spawned[-1] in fake.killed


@pytest.mark.timeout(30)
def test_losing_the_only_replica_with_no_room_stops_in_one_line(monkeypatch):
    fake = FakeRay(lambda slot, n: "dead", free={})
    pool = fake_pool(monkeypatch, fake, 1, warn=lambda m: None)
    (result,) = calls(pool, 1)
    assert isinstance(result, EngineDeadError) and "no rollout replica is left" in str(result)
    assert "\n" not in str(result)


def test_weight_sync_replaces_a_dead_replica_with_the_new_weights(monkeypatch):
    import torch

    fake = FakeRay(lambda slot, n: "dead" if (slot, n) == (0, 0) else "ok")
    pool = fake_pool(monkeypatch, fake, 2, warn=lambda m: None)
    asyncio.run(pool.update_weights({"w": torch.ones(2)}))
    assert fake.incarnations == {0: 1, 1: 0} and pool.stats()["replicas"] == 2
    new = fake.spawned[-1]
    assert torch.equal(new.loaded[-1]["w"], torch.ones(2))  # started from the weights being synced
    assert torch.equal(fake.spawned[1].loaded[-1]["w"], torch.ones(2))
    assert sorted(r.token_ids[0] for r in calls(pool, 4)) == [0, 0, 1, 1]


@pytest.mark.timeout(30)
def test_a_replica_stuck_in_weight_sync_is_replaced_within_the_timeout(monkeypatch):
    """A stopped replica process (SIGSTOP) held the sync until Ray's own watchdog, minutes later."""
    import torch

    fake = FakeRay(lambda slot, n: "stuck" if (slot, n) == (0, 0) else "ok")
    pool = fake_pool(monkeypatch, fake, 2, call_timeout_s=0.3, warn=lambda m: None)
    t0 = time.monotonic()
    asyncio.run(pool.update_weights({"w": torch.ones(2)}))
    assert time.monotonic() - t0 < 5 and pool.restarts == 1 and fake.spawned[0] in fake.killed
    assert torch.equal(fake.spawned[-1].loaded[-1]["w"], torch.ones(2)) and pool.stats()["replicas"] == 2


@pytest.mark.timeout(30)
def test_a_replica_stuck_in_sleep_stops_the_run_in_one_line(monkeypatch):
    fake = FakeRay(lambda slot, n: "stuck" if slot == 1 else "ok")
    pool = fake_pool(monkeypatch, fake, 2, call_timeout_s=0.3, warn=lambda m: None)
    with pytest.raises(EngineDeadError, match=r"did not release its accelerator memory within 0\.3 s"):
        pool.sleep()
