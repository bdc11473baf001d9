"""Rows that share a prompt run through the model once per prompt, not once per row.

GRPO samples ``n`` completions of every prompt, so a micro-batch's rows are
mostly the same prompt followed by different completions: with 200-token
prompts and 64-token answers three quarters of the padded batch is prompt,
recomputed ``n`` times. Here the rows of one prompt become one packed sequence
``[prompt, completion 1, completion 2, ...]``: the prompt's positions are
0..p-1, each completion continues at p, and a block mask lets every completion
attend to the prompt and causally to itself only. Each completion token then
sees exactly the keys and values it sees in its own row, at the same positions,
so log-probs, the loss and every gradient are those of the padded batch (the
prompt's gradient is the sum over its completions, accumulated through the
shared positions). The prompt of a row is everything before its first
generated (loss-mask) token.

Used by ``logits.response_logprobs`` when at least two rows of a micro-batch
share a prompt and the model's attention takes a 4-D mask (sdpa, eager);
results are scattered back to the padded ``[B, L-1]`` layout the update reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

#: largest block mask (groups x packed length^2) worth building; past it the padded batch runs instead
#: (attention kernels take a dense mask: its size and the attention work grow with the square of the packed length)
MAX_MASK_ELEMENTS = 1 << 26


@dataclass
class SharedPrefixPack:
    """Packed groups (one per distinct prompt), right-padded to the longest group."""

    input_ids: torch.Tensor  # [G, T]
    position_ids: torch.Tensor  # [G, T]
    allowed: torch.Tensor  # [G, 1, T, T] bool: query may attend key
    source: torch.Tensor  # [N] index into the flattened [G*T] positions: the hidden state of each loss target
    tokens: int  # real (unpadded) packed tokens

    def attention_mask(self, attn_implementation: str | None, dtype: torch.dtype) -> torch.Tensor:
        """The 4-D mask in the form the attention takes: boolean for sdpa, additive for eager."""
        if attn_implementation == "sdpa":
            return self.allowed
        blocked = torch.zeros(self.allowed.shape, dtype=dtype, device=self.allowed.device)
        return blocked.masked_fill(~self.allowed, torch.finfo(dtype).min)


def _prompt_length(mask: Sequence[int]) -> int:
    for i, m in enumerate(mask):
        if m:
            return i
    return len(mask)


def shared_prefix_pack(token_ids: Sequence[Sequence[int]], loss_masks: Sequence[Sequence[int]],
                       device: torch.device, max_mask_elements: int = MAX_MASK_ELEMENTS) -> SharedPrefixPack | None:
    """The packed layout of rows (token ids and loss masks), or None when no two rows share a prompt
    or the block mask would hold more than ``max_mask_elements``.

    ``source`` lists, row by row and position by position, the packed place of
    the hidden state at position t of a row for every t whose next token is
    in the loss mask: the order ``tensor[loss_mask[:, 1:] > 0]`` reads a
    right-padded ``[B, L-1]`` tensor in.
    """
    groups: dict[tuple[int, ...], list[int]] = {}
    prompts: list[int] = []
    for b, (ids, mask) in enumerate(zip(token_ids, loss_masks)):
        p = _prompt_length(mask)
        prompts.append(p)
        groups.setdefault(tuple(ids[:p]), []).append(b)
    if len(groups) == len(prompts):
        return None
    layouts = []  # per group: (ids, positions, owner of each position: -1 prompt / member index, start of each row)
    where: dict[int, tuple[int, int]] = {}  # row -> (group, packed offset of its first generated token)
    for g, (prompt, members) in enumerate(groups.items()):
        p = len(prompt)
        ids, pos, owner = list(prompt), list(range(p)), [-1] * p
        for j, b in enumerate(members):
            rest = list(token_ids[b][p:])
            where[b] = (g, len(ids))
            ids += rest
            pos += range(p, p + len(rest))
            owner += [j] * len(rest)
        layouts.append((ids, pos, owner))
    width = max(len(lay[0]) for lay in layouts)
    n_groups = len(layouts)
    if n_groups * width * width > max_mask_elements:
        return None
    input_ids = torch.zeros((n_groups, width), dtype=torch.long)
    position_ids = torch.zeros((n_groups, width), dtype=torch.long)
    owners = torch.full((n_groups, width), -2, dtype=torch.long)  # -2: padding
    for g, (ids, pos, owner) in enumerate(layouts):
        n = len(ids)
        input_ids[g, :n] = torch.as_tensor(ids, dtype=torch.long)
        position_ids[g, :n] = torch.as_tensor(pos, dtype=torch.long)
        owners[g, :n] = torch.as_tensor(owner, dtype=torch.long)
    index = torch.arange(width)
    causal = index.view(-1, 1) >= index.view(1, -1)  # [T(query), T(key)]
    q_owner, k_owner = owners.unsqueeze(-1), owners.unsqueeze(-2)
    same = (q_owner == k_owner) & (q_owner >= -1)  # prompt-prompt or within one completion
    to_prompt = (k_owner == -1) & (q_owner >= 0)  # a completion sees the whole prompt
    pad_self = (q_owner == -2) & torch.eye(width, dtype=torch.bool)  # pads see only themselves: no empty row
    allowed = ((same | to_prompt) & causal) | pad_self
    source = []
    for b, (ids, mask) in enumerate(zip(token_ids, loss_masks)):
        g, start = where[b]
        p = prompts[b]
        for t in range(len(ids) - 1):
            if mask[t + 1]:
                source.append(g * width + (t if t < p else start + t - p))
    return SharedPrefixPack(input_ids.to(device), position_ids.to(device), allowed.unsqueeze(1).to(device),
                            torch.as_tensor(source, dtype=torch.long, device=device), sum(len(x[0]) for x in layouts))
