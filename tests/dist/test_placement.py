"""placement=split: the trainer's GPUs are reserved in Ray before replicas start, so replicas get the others; a
replica that lands on a trainer rank's GPU anyway stops the run in one line. Ray's GPUs are faked here (a CPU
machine can declare num_gpus; Ray hands out ids all the same)."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed")

from memrl.config import ConfigError  # noqa: E402
from memrl.dist.placement import check_no_shared_gpu, hold_trainer_gpus  # noqa: E402
from memrl.dist.pool import _Replica  # noqa: E402


@pytest.fixture
def ray_with_two_gpus(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@ray.remote(num_cpus=0, num_gpus=1)
class Probe:
    """Stands in for a replica: the same ``where`` report, without loading a model."""

    where = _Replica.where


@pytest.mark.timeout(120)
def test_replicas_get_the_gpus_the_trainer_does_not_use(ray_with_two_gpus):
    held, trainer_gpus = hold_trainer_gpus(ray, "split", 1.0, True, trainer_ranks=1)
    assert held is not None and trainer_gpus == ["0"]
    probe = Probe.remote()
    assert ray.get(probe.where.remote())[1] == ["1"]  # not GPU 0, which trainer rank 0 uses
    check_no_shared_gpu(ray, [probe], trainer_gpus)  # passes
    assert hold_trainer_gpus(ray, "colocate", 1.0, True, 1) == (None, [])  # sharing asked for
    assert hold_trainer_gpus(ray, "split", 0.0, True, 1) == (None, [])  # CPU replicas


@pytest.mark.timeout(120)
def test_a_replica_on_a_trainer_gpu_stops_the_run_in_one_line(ray_with_two_gpus):
    probes = [Probe.remote(), Probe.remote()]  # nothing reserved: one of them gets GPU 0
    with pytest.raises(ConfigError) as err:
        check_no_shared_gpu(ray, probes, ["0"])
    message = str(err.value)
    assert "\n" not in message and "was given GPU 0" in message and "trainer rank 0 uses" in message
