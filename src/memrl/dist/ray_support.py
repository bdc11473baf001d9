"""Ray import guard, cluster start/join, and the one-line resource report.

Joining a cluster checks first that something answers at its address, with a short
timeout: Ray itself retries an unreachable address for minutes and says nothing, and
``address=auto`` with no cluster running ends in a long traceback. Both become one line.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from memrl.config import ConfigError

REACH_TIMEOUT_S = 5.0  # a live GCS accepts a TCP connection at once; this only has to outlast a slow network
_HOW = ("start one with 'ray start --head --port=6379' (then cluster.address=auto or HOST:6379), or leave "
        "cluster.address unset to start Ray on this machine")


def require_ray() -> Any:
    try:
        import ray
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise ImportError("Ray is needed for cluster.rollout_replicas > 0: pip install 'memrl[ray]'") from None
    return ray


def resolve_address(address: str) -> str:
    """``address`` as host:port ('auto' read as Ray reads it: RAY_ADDRESS, else this machine's running cluster);
    ConfigError in one line when there is none. ``ray://`` (Ray client) addresses are returned unchanged."""
    if address.startswith("ray://"):
        return address
    if address == "auto":
        from ray._private.services import canonicalize_bootstrap_address

        try:
            found = canonicalize_bootstrap_address("auto")
        except (ConnectionError, ValueError):
            found = None
        if not found:
            env = os.environ.get("RAY_ADDRESS")
            where = f"RAY_ADDRESS={env!r} is set but" if env else "no Ray cluster is running on this machine and"
            raise ConfigError(f"cluster.address=auto: {where} none was found; {_HOW}")
        return found
    return address


def check_reachable(address: str, timeout_s: float = REACH_TIMEOUT_S, shown: str | None = None) -> None:
    """ConfigError in one line unless a TCP connection to ``address`` (host:port or ray://host:port) opens within
    ``timeout_s``; run before ``ray.init``, which retries an unreachable address for minutes in silence."""
    shown = shown or address
    hostport = address.split("://", 1)[-1]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"cluster.address={address!r}: expected 'auto' or HOST:PORT (e.g. 10.0.0.1:6379)")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as err:
        reason = "timed out" if isinstance(err, socket.timeout) else (err.strerror or type(err).__name__).lower()
        raise ConfigError(f"cluster.address={shown}: no Ray cluster answers there ({reason} after at most "
                          f"{timeout_s:g} s); {_HOW}") from None


def init_ray(address: str | None, num_cpus: int | None = None) -> str:
    """Join ``address`` ('auto' or host:port of ``ray start --head``) or start Ray locally; return a status line."""
    ray = require_ray()
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False,
                                  "include_dashboard": False}
        env = os.environ.get("RAY_ADDRESS")
        if address or env:  # unset under a Ray job: its driver's RAY_ADDRESS names the cluster
            given = address or env
            kwargs["address"] = resolve_address(given)
            resolved = kwargs["address"]
            named = given if address else f"$RAY_ADDRESS={env}"
            check_reachable(resolved, shown=named if given == resolved else f"{named} ({resolved})")
        else:  # a new local cluster: a bare ray.init() would join the one /tmp/ray last recorded, even a dead one
            kwargs["address"] = "local"
            if num_cpus is not None:
                kwargs["num_cpus"] = num_cpus
        try:
            ray.init(**kwargs)
        except ConnectionError as err:  # reachable but not a Ray cluster (or it went away meanwhile)
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ConfigError(f"cluster.address={address}: could not join the Ray cluster: {first[:200]}") from None
    return status_line()


def status_line() -> str:
    """What the cluster has: nodes, CPUs, GPUs, memory (printed at the start of a run)."""
    ray = require_ray()
    res = ray.cluster_resources()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    gib = res.get("memory", 0) / 2**30
    return (f"ray cluster: {len(nodes)} node(s), {res.get('CPU', 0):g} CPU, {res.get('GPU', 0):g} GPU, "
            f"{gib:.1f} GiB memory")
