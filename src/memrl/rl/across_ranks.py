"""Values of every training process, for statistics TRL takes over all of them (``accelerator.gather``).

Why here: ``top_entropy_quantile``'s threshold is the quantile of the micro-batch's response-token entropies of
*every* process in TRL (``get_high_entropy_mask`` pads its processes' tokens, gathers them and drops the padding);
one rank's own quantile keeps a different share of tokens than a single process on the same rows would. The
objective stays usable without torch.distributed: with no process group, or a group of one, the values are the
caller's own and nothing is communicated.

A gather is collective: every rank of the group must call it as many times, in the same order (the trainer pads
the ranks' micro-batch passes to one count for it; a padding pass joins with no values of its own).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def spans_ranks() -> bool:
    """Whether a process group of more than one rank is up (the gather then talks to the others)."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def all_ranks(values: torch.Tensor, contribute: bool = True) -> torch.Tensor:
    """The 1-D ``values`` of every rank, rank 0's first (each rank's own without a group of several).

    Ranks hold different counts, so the counts are gathered first, each rank's values padded to the longest and
    gathered, then each trimmed to its count (no sentinel to collide with a value). ``contribute=False``: join the
    collective with no values (a padding pass, whose rows are not the rank's). NCCL gathers device tensors; other
    backends gather on the CPU; the result is on ``values``' device.
    """
    local = values.detach().reshape(-1) if contribute else values.detach().reshape(-1)[:0]
    if not spans_ranks():
        return local
    device = local.device if "nccl" in str(dist.get_backend()) else torch.device("cpu")
    local = local.to(device)
    world = dist.get_world_size()
    count = torch.tensor([local.numel()], dtype=torch.long, device=device)
    counts = [torch.zeros_like(count) for _ in range(world)]
    dist.all_gather(counts, count)
    sizes = [int(c.item()) for c in counts]
    longest = max(sizes)
    if longest == 0:
        return values.detach().reshape(-1)[:0]
    padded = torch.zeros(longest, dtype=local.dtype, device=device)
    padded[: local.numel()] = local
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    return torch.cat([part[:size] for part, size in zip(parts, sizes)]).to(values.device)
