"""Ray import guard, cluster start/join, and the one-line resource report."""

from __future__ import annotations

from typing import Any


def require_ray() -> Any:
    try:
        import ray
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise ImportError("Ray is needed for cluster.rollout_replicas > 0: pip install 'memrl[ray]'") from None
    return ray


def init_ray(address: str | None, num_cpus: int | None = None) -> str:
    """Join ``address`` ('auto' or host:port of ``ray start --head``) or start Ray locally; return a status line."""
    ray = require_ray()
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False,
                                  "include_dashboard": False}
        if address:
            kwargs["address"] = address
        elif num_cpus is not None:
            kwargs["num_cpus"] = num_cpus
        ray.init(**kwargs)
    return status_line()


def status_line() -> str:
    """What the cluster has: nodes, CPUs, GPUs, memory (printed at the start of a run)."""
    ray = require_ray()
    res = ray.cluster_resources()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    gib = res.get("memory", 0) / 2**30
    return (f"ray cluster: {len(nodes)} node(s), {res.get('CPU', 0):g} CPU, {res.get('GPU', 0):g} GPU, "
            f"{gib:.1f} GiB memory")
