"""Joining a Ray cluster that is not there fails at once in one line (Ray alone retries for minutes in silence,
and ``address=auto`` with no cluster ends in a long traceback)."""

from __future__ import annotations

import time

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed")

import ray._private.services as services  # noqa: E402

from memrl.config import ConfigError  # noqa: E402
from memrl.dist.ddp import free_port  # noqa: E402
from memrl.dist.ray_support import check_reachable, init_ray  # noqa: E402


@pytest.fixture
def no_local_cluster(monkeypatch):
    """As on a machine where no Ray runs (other tests' clusters on this machine are not seen)."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(services, "find_gcs_addresses", lambda: [])
    monkeypatch.setattr(services, "find_bootstrap_address", lambda temp_dir: None)


@pytest.mark.timeout(60)
def test_an_unreachable_address_fails_fast_in_one_line():
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as err:
        init_ray(address)
    assert time.monotonic() - t0 < 10 and not ray.is_initialized()
    message = str(err.value)
    assert "\n" not in message and f"cluster.address={address}" in message and "ray start --head" in message


@pytest.mark.timeout(60)
def test_a_silent_host_times_out_quickly(monkeypatch):
    def silent(addr, timeout):  # a host that drops packets: the connect times out
        raise TimeoutError("timed out")

    monkeypatch.setattr("socket.create_connection", silent)
    with pytest.raises(ConfigError, match=r"timed out after at most 0\.5 s"):
        check_reachable("10.255.255.1:6379", timeout_s=0.5)
    with pytest.raises(ConfigError, match="expected 'auto' or HOST:PORT"):
        check_reachable("nohostport")


@pytest.mark.timeout(60)
def test_auto_with_no_cluster_is_one_line(no_local_cluster):
    with pytest.raises(ConfigError) as err:
        init_ray("auto")
    message = str(err.value)
    assert "\n" not in message and message.startswith("cluster.address=auto: no Ray cluster is running")
    assert not ray.is_initialized()


@pytest.mark.timeout(60)
def test_auto_follows_ray_address_and_checks_it(no_local_cluster, monkeypatch):
    address = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("RAY_ADDRESS", address)
    with pytest.raises(ConfigError, match=rf"cluster.address=auto \(\S+:{address.split(':')[1]}\): no Ray cluster "
                       "answers there"):
        init_ray("auto")


@pytest.mark.timeout(60)
def test_unset_never_joins_a_dead_cluster_ray_remembers(monkeypatch):
    """cluster.address unset: a bare ray.init() joined the cluster /tmp/ray last recorded, and hung for minutes
    when it was dead; memrl starts its own ("local"), or checks the RAY_ADDRESS a Ray job's driver is given."""
    asked: list[dict] = []
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: asked.append(kw))
    monkeypatch.setattr("memrl.dist.ray_support.status_line", lambda: "ok")
    init_ray(None, num_cpus=3)
    assert asked[-1]["address"] == "local" and asked[-1]["num_cpus"] == 3
    dead = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("RAY_ADDRESS", dead)
    with pytest.raises(ConfigError, match=rf"cluster.address=\$RAY_ADDRESS={dead}: no Ray cluster answers there"):
        init_ray(None)
    assert len(asked) == 1
