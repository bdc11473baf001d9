"""From trajectories to training rows, and micro-batches under a token budget.

Every conversation of every episode becomes one row. Rows are sorted by length
and packed greedily into micro-batches whose padded size (rows x longest row)
stays under ``micro_batch_tokens``, so padding is limited to the small length
differences inside a bucket instead of padding everything to the longest row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from memrl.rl.functional import second_stat
from memrl.train.packing import SharedPrefixPack, shared_prefix_pack
from memrl.types import Trajectory


@dataclass
class Row:
    """One conversation as a training row. Tensors are 1-D over its tokens."""

    token_ids: list[int]
    loss_mask: list[int]
    engine_logprobs: list[float]
    episode: int
    step: int
    step_reward: float = 0.0
    old_logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    is_weights: torch.Tensor | None = None  # rollout correction's importance weights over target positions
    train_mask: torch.Tensor | None = None  # the loss mask after rollout correction's rejection (target positions)
    generated: list[int] | None = None  # the loss mask mask_truncated_rows zeroed (None: not masked)
    extra: dict[str, float] = field(default_factory=dict)
    group: str = ""  # the episode's group (optimal_token_baseline compares a group's episodes token by token)
    sum_pi_squared: torch.Tensor | None = None  # the old policy's sum pi^2 at each target position (OTB's)

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_response(self) -> int:
        return sum(self.loss_mask)

    @property
    def num_trained(self) -> int:
        """Response tokens the loss reads: all of them, less those rollout correction rejected."""
        return self.num_response if self.train_mask is None else int(self.train_mask.sum())


def rows_from_trajectories(trajectories: Sequence[Trajectory]) -> list[Row]:
    rows = []
    for e, traj in enumerate(trajectories):
        for s, conv in enumerate(traj.conversations):
            if conv.num_generated == 0:
                continue  # nothing to train on (e.g. a zero-budget turn)
            rows.append(Row(list(conv.token_ids), list(conv.loss_mask), list(conv.logprobs), e, s,
                            float(conv.reward or 0.0), group=traj.group_id))
    return rows


def mask_truncated_rows(rows: Sequence[Row], trajectories: Sequence[Trajectory]) -> int:
    """TRL's mask_truncated_completions: every row whose conversation's last turn ran out of tokens keeps its
    place with a loss mask of zeros (it weighs nothing, yet counts as a sequence where the loss averages per
    sequence, as TRL's masked completions); how many. Called after the advantages, which it leaves as they
    were computed (TRL masks after scoring too); ``row.generated`` keeps the mask, whose span still counts in
    Dr. GRPO's width (TRL's max_completion_length is a constant)."""
    masked = 0
    for r in rows:
        if truncated(trajectories[r.episode].conversations[r.step]):
            r.generated, r.loss_mask = r.loss_mask, [0] * len(r.loss_mask)
            masked += 1
    return masked


def truncated(conv: Any) -> bool:
    """Whether a conversation's last model turn ended at its token budget (finish reason ``length``) rather than
    at a stop: the workflows and the gateway record the reason in ``meta["finish"]``."""
    return conv.meta.get("finish") == "length"


def micro_batches(rows: Sequence[Row], token_budget: int,
                  fits: Callable[[int, int], bool] | None = None) -> list[list[int]]:
    """Indices of ``rows`` grouped so that ``len(group) * max_len <= token_budget`` (and, given, ``fits(len(group),
    max_len)``: the memory a group's backward needs, :mod:`memrl.train.memory_fit`).

    Rows that share a prompt are kept next to each other (groups ordered by
    their longest row, rows within a group by length), so a micro-batch holds
    whole groups where the budget allows and their prompt is computed once
    (``memrl.train.packing``); padding stays limited to length differences
    between neighbours. A row longer than the budget gets a micro-batch of its own.
    """
    prompt_of: dict[tuple[int, ...], int] = {}
    group = [prompt_of.setdefault(_prompt_key(r), len(prompt_of)) for r in rows]
    longest_of = [0] * len(prompt_of)
    for i, r in enumerate(rows):
        longest_of[group[i]] = max(longest_of[group[i]], len(r))
    order = sorted(range(len(rows)), key=lambda i: (longest_of[group[i]], group[i], len(rows[i])))
    groups: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        longest_if = max(longest, len(rows[i]))
        if current and ((len(current) + 1) * longest_if > token_budget
                        or (fits is not None and not fits(len(current) + 1, longest_if))):
            groups.append(current)
            current, longest_if = [], len(rows[i])
        current.append(i)
        longest = longest_if
    if current:
        groups.append(current)
    return groups


def _prompt_key(row: Row) -> tuple[int, ...]:
    """The tokens before the row's first generated one."""
    mask = row.loss_mask
    p = next((i for i, m in enumerate(mask) if m), len(mask))
    return tuple(row.token_ids[:p])


@dataclass
class Collated:
    input_ids: torch.Tensor  # [B, L] right-padded
    attention_mask: torch.Tensor  # [B, L]
    targets: torch.Tensor  # [B, L-1] token t+1 predicted at position t
    loss_mask: torch.Tensor  # [B, L-1] float
    right_padded: bool = True  # every row's padding comes after its last token
    pack: SharedPrefixPack | None = None  # rows sharing a prompt, packed (``memrl.train.packing``)

    def forward_mask(self) -> torch.Tensor | None:
        """The padding mask to give a causal LM, or None when the causal mask alone gives the same values.

        With right padding, a real token never attends to a pad (pads come after
        it), so the padding mask changes only the outputs at pad positions, which
        no loss reads. Without it transformers builds no 4-D mask and sdpa takes
        its causal kernel, with grouped KV heads as they are (no repeated copy).
        Positions are 0..L-1 either way.
        """
        return None if self.right_padded else self.attention_mask


def collate(rows: Sequence[Row], pad_id: int, device: torch.device) -> Collated:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, r in enumerate(rows):
        n = len(r)
        ids[i, :n] = torch.tensor(r.token_ids)
        att[i, :n] = 1
        mask[i, :n] = torch.tensor(r.loss_mask, dtype=torch.float32)
    ids, att, mask = ids.to(device), att.to(device), mask.to(device)
    pack = shared_prefix_pack([r.token_ids for r in rows], [r.loss_mask for r in rows], device)
    return Collated(ids, att, ids[:, 1:], mask[:, 1:], pack=pack)


def token_logprobs(model: torch.nn.Module, batch: Collated, temperature: float = 1.0,
                   with_entropy: bool = False, response_only: bool = False,
                   sum_pi_squared: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs ``[B, L-1]`` of each next token (and its entropy, or with ``sum_pi_squared`` the distribution's
    ``sum pi^2``) under ``model``.

    Logits are divided by the rollout temperature, as verl does, so they match
    the distribution the engine sampled from. Computed in float32.

    ``response_only``: only the loss-mask positions are computed (0 elsewhere),
    through the decoder and a chunked LM head (``memrl.train.logits``); loss and
    gradients of any masked objective are unchanged. Models that cannot be split
    fall back to the whole-model path.
    """
    if response_only:
        from memrl.train.logits import response_logprobs

        got = response_logprobs(model, batch, temperature, with_entropy, sum_pi_squared=sum_pi_squared)
        if got is not None:
            return got
    out = model(input_ids=batch.input_ids, attention_mask=batch.forward_mask(), use_cache=False)
    logits = out.logits[:, :-1, :].float()
    if temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1).gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1)
    return logp, second_stat(logits, with_entropy, sum_pi_squared)


def row_tensor(rows: Sequence[Row], attr: str, width: int, device: torch.device) -> torch.Tensor:
    """Stack a per-row 1-D tensor attribute (length len(row)-1) into ``[B, width]``, zero-padded."""
    out = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, r in enumerate(rows):
        t = getattr(r, attr)
        out[i, : t.numel()] = t
    return out.to(device)


def iter_chunks(items: Sequence[int], n: int) -> Iterator[list[int]]:
    """Split ``items`` into ``n`` nearly equal consecutive chunks (no empty chunk)."""
    n = max(1, min(n, len(items)))
    size, extra = divmod(len(items), n)
    start = 0
    for k in range(n):
        end = start + size + (1 if k < extra else 0)
        yield list(items[start:end])
        start = end
