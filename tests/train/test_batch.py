"""Collated micro-batches: right-padded rows run without a padding mask, with the same loss and gradients."""

from __future__ import annotations

import dataclasses
from array import array

import pytest
import torch

from memrl.models.resolve import load_model
from memrl.rl.losses import agg_loss, compute_policy_loss
from memrl.train.batch import Row, collate, micro_batches, token_logprobs


def _rows(vocab: int) -> list[Row]:
    """Rows of four lengths (so three of them are padded), prompt then generated tokens."""
    g = torch.Generator().manual_seed(5)
    rows = []
    for prompt, gen in ((9, 6), (3, 2), (14, 11), (6, 6)):
        ids = torch.randint(0, vocab, (prompt + gen,), generator=g).tolist()
        rows.append(Row(ids, [0] * prompt + [1] * gen, [0.0] * (prompt + gen), episode=0, step=0))
    return rows


def _loss_and_grads(model: torch.nn.Module, batch, response_only: bool) -> tuple[torch.Tensor, dict]:
    model.zero_grad(set_to_none=True)
    logp, ent = token_logprobs(model, batch, 0.8, with_entropy=True, response_only=response_only)
    mask = batch.loss_mask
    g = torch.Generator().manual_seed(2)
    adv = torch.randn(mask.shape, generator=g)
    old = logp.detach() + 0.2 * torch.randn(mask.shape, generator=g)
    pg, *_ = compute_policy_loss(old, logp, adv, mask, cliprange_low=0.2, cliprange_high=0.28, clip_ratio_c=3.0,
                                 loss_agg_mode="token-mean")
    loss = pg - 0.01 * agg_loss(ent, mask, "token-mean")
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("response_only", [False, True])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_no_padding_mask_gives_the_masked_loss_and_gradients(response_only, attn):
    torch.manual_seed(0)
    model = load_model("tiny", device="cpu", dtype="float32")
    model.config._attn_implementation = attn
    model.train()
    batch = collate(_rows(model.config.vocab_size), pad_id=0, device=torch.device("cpu"))
    assert batch.forward_mask() is None and bool((batch.attention_mask == 0).any())  # padding is there
    masked = dataclasses.replace(batch, right_padded=False)
    assert masked.forward_mask() is batch.attention_mask
    loss0, g0 = _loss_and_grads(model, masked, response_only)
    loss1, g1 = _loss_and_grads(model, batch, response_only)
    torch.testing.assert_close(loss1, loss0, atol=1e-5, rtol=1e-5)
    assert g0.keys() == g1.keys() and g0
    for name in g0:
        torch.testing.assert_close(g1[name], g0[name], atol=1e-5, rtol=1e-5)


def test_collate_reads_any_sequence_type():
    """Conversations may hold their tokens as compact arrays; rows built from them collate the same."""
    rows = [Row([5, 6, 7], [0, 1, 1], [0.0, -1.0, -2.0], 0, 0), Row([8, 9], [0, 1], [0.0, -0.5], 1, 0)]
    compact = [Row(array("i", r.token_ids), array("b", r.loss_mask), array("d", r.engine_logprobs), r.episode, r.step)
               for r in rows]
    a, b = (collate(rs, pad_id=0, device=torch.device("cpu")) for rs in (rows, compact))
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.loss_mask, b.loss_mask)
    assert a.input_ids.tolist() == [[5, 6, 7], [8, 9, 0]]
    assert a.targets.tolist() == [[6, 7], [9, 0]] and a.loss_mask.tolist() == [[1.0, 1.0], [1.0, 0.0]]


def test_micro_batches_stay_under_the_budget_and_cover_every_row():
    rows = [Row([1] * n, [1] * n, [0.0] * n, 0, 0) for n in (5, 30, 7, 12, 12, 3, 40)]
    groups = micro_batches(rows, token_budget=40)
    assert sorted(i for g in groups for i in g) == list(range(len(rows)))
    for g in groups:
        assert len(g) * max(len(rows[i]) for i in g) <= 40
