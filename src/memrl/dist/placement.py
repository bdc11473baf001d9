"""Trainer ranks and rollout replicas never share a GPU unless asked (``cluster.placement=colocate``).

The trainer's ranks are not Ray actors, so Ray does not know which GPUs they hold and would
hand the same ones to replicas. Under ``placement=split`` the run therefore reserves, in a
Ray placement group pinned to this node, one GPU per trainer rank that runs here before any
replica starts (Ray gives the group the lowest free ids, the ones the ranks use: cuda:0..W-1),
and then checks where every replica landed: a replica holding a GPU a rank on this node uses
stops the run in one line, naming both, rather than two processes filling one GPU.
"""

from __future__ import annotations

import os
from typing import Any

from memrl.config import ConfigError

RESERVE_TIMEOUT_S = 30.0


def local_trainer_gpus(ranks_here: int) -> list[str]:
    """Physical ids of the GPUs the trainer ranks on this node use (rank r: cuda:r under CUDA_VISIBLE_DEVICES)."""
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return [visible[r] if r < len(visible) else str(r) for r in range(ranks_here)] if visible else \
        [str(r) for r in range(ranks_here)]


def ranks_on_this_node(configured: int) -> int:
    """Trainer ranks on this machine: torchrun's LOCAL_WORLD_SIZE, else ``cluster.trainers`` (spawned here)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", configured))


def reserve_trainer_gpus(ray: Any, count: int) -> Any:
    """A placement group holding ``count`` of this node's Ray GPUs (at most what Ray has here) for the trainer
    ranks; None when there is nothing to reserve. ConfigError in one line when Ray cannot give them."""
    ip = ray.util.get_node_ip_address()
    here = sum(n.get("Resources", {}).get("GPU", 0) for n in ray.nodes()
               if n.get("Alive") and n.get("NodeManagerAddress") == ip)
    count = min(count, int(here))
    if count <= 0:
        return None  # Ray was not given this node's GPUs: it cannot hand them to replicas either
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group([{"GPU": 1, f"node:{ip}": 0.001}] * count, strategy="STRICT_PACK")
    try:
        ray.get(group.ready(), timeout=RESERVE_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - GetTimeoutError or the group could not be placed
        remove_placement_group(group)
        raise ConfigError(f"cluster.placement=split: Ray could not reserve {count} GPU(s) on this node ({ip}) "
                          "for the trainer ranks (something else holds them); free them, or use "
                          "cluster.placement=colocate to share GPUs with the replicas") from None
    return group


def check_no_shared_gpu(ray: Any, actors: list[Any], trainer_gpus: list[str]) -> None:
    """ConfigError in one line when a replica was given a GPU that a trainer rank on this node uses."""
    if not trainer_gpus:
        return
    ip = ray.util.get_node_ip_address()
    for i, (node, gpus) in enumerate(ray.get([a.where.remote() for a in actors])):
        shared = sorted(set(map(str, gpus)) & set(trainer_gpus)) if node == ip else []
        if shared:
            rank = trainer_gpus.index(shared[0])
            raise ConfigError(f"cluster.placement=split: rollout replica {i} was given GPU {shared[0]} on {ip}, "
                              f"which trainer rank {rank} uses; start this node's Ray with the trainer's GPUs left "
                              "out (CUDA_VISIBLE_DEVICES or --num-gpus), or set cluster.placement=colocate to share")


def hold_trainer_gpus(ray: Any, placement: str, replica_gpus: float, cuda: bool,
                      trainer_ranks: int) -> tuple[Any, list[str]]:
    """Before the replicas start: (the reservation, the GPU ids the ranks here use), or (None, []) when nothing
    can clash (colocate is sharing on purpose; CPU training or CPU replicas hold no GPU)."""
    if placement != "split" or replica_gpus <= 0 or not cuda:
        return None, []
    ranks = ranks_on_this_node(trainer_ranks)
    return reserve_trainer_gpus(ray, ranks), local_trainer_gpus(ranks)
