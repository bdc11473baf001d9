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


def _group_rows(vocab: int) -> list[Row]:
    """Two prompts with three and two completions of different lengths (one with a tool gap), plus a lone row."""
    g = torch.Generator().manual_seed(11)
    rows = []
    for prompt_len, answers in ((10, (5, 9, 2)), (6, (7, 4)), (8, (3,))):
        prompt = torch.randint(0, vocab, (prompt_len,), generator=g).tolist()
        for n in answers:
            answer = torch.randint(0, vocab, (n,), generator=g).tolist()
            mask = [0] * prompt_len + [1] * n
            if n > 6:
                mask[prompt_len + 3] = 0  # a tool observation inside the answer
            rows.append(Row(prompt + answer, mask, [0.0] * (prompt_len + n), episode=len(rows), step=0))
    return rows


def test_rows_without_a_shared_prompt_are_not_packed():
    batch = collate(_rows(50), pad_id=0, device=torch.device("cpu"))
    assert batch.pack is None


def test_shared_prompts_run_once():
    rows = _group_rows(50)
    pack = collate(rows, pad_id=0, device=torch.device("cpu")).pack
    assert pack is not None and pack.input_ids.shape[0] == 3  # one packed sequence per distinct prompt
    assert pack.tokens == (10 + 5 + 9 + 2) + (6 + 7 + 4) + (8 + 3)
    assert pack.position_ids[0, :13].tolist() == list(range(10)) + [10, 11, 12]  # prompt, then answer 1
    assert pack.position_ids[0, 15:17].tolist() == [10, 11]  # answer 2 restarts after the prompt
    allowed = pack.allowed[0, 0]
    assert bool(allowed[15, :10].all()) and not bool(allowed[15, 10:15].any())  # answer 2 sees the prompt only


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("lora", [False, True])
def test_packed_shared_prompts_give_the_padded_loss_and_gradients(attn, lora):
    from memrl.config.schema import LoraConfig
    from memrl.train.policy import add_lora

    torch.manual_seed(0)
    model = load_model("tiny", device="cpu", dtype="float32")
    model.config._attn_implementation = attn
    if lora:
        model = add_lora(model, LoraConfig(enabled=True, r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj"]))
        for name, p in model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.05)
    model.train()
    batch = collate(_group_rows(model.get_input_embeddings().num_embeddings), pad_id=0, device=torch.device("cpu"))
    assert batch.pack is not None
    loss0, g0 = _loss_and_grads(model, dataclasses.replace(batch, pack=None), response_only=True)
    loss1, g1 = _loss_and_grads(model, batch, response_only=True)
    torch.testing.assert_close(loss1, loss0, atol=1e-5, rtol=1e-5)
    assert g0.keys() == g1.keys() and g0
    for name in g0:
        torch.testing.assert_close(g1[name], g0[name], atol=1e-5, rtol=1e-5)
    with torch.no_grad():  # the values themselves, at every loss position, and 0 elsewhere
        packed, _ = token_logprobs(model, batch, 0.8, response_only=True)
        padded, _ = token_logprobs(model, batch, 0.8)
    mask = batch.loss_mask > 0
    torch.testing.assert_close(packed[mask], padded[mask], atol=1e-5, rtol=1e-5)
    assert torch.all(packed[~mask] == 0)


def test_micro_batches_keep_rows_of_one_prompt_together():
    rows = _group_rows(50)  # rows 0-2 share a prompt, 3-4 another, 5 is alone
    shuffled = [rows[i] for i in (3, 0, 5, 1, 4, 2)]
    groups = micro_batches(shuffled, token_budget=3 * 19)
    prompt = [_pkey(shuffled[i]) for g in groups for i in g]
    assert prompt == sorted(prompt, key=prompt.index)  # each prompt's rows are contiguous
    assert sorted(i for g in groups for i in g) == list(range(6))
    for g in groups:
        assert len(g) * max(len(shuffled[i]) for i in g) <= 3 * 19


def _pkey(row: Row) -> tuple[int, ...]:
    return tuple(row.token_ids[: row.loss_mask.index(1)])


def test_packing_is_skipped_when_its_mask_would_be_too_large():
    from memrl.train.packing import shared_prefix_pack

    rows = _group_rows(50)
    ids, masks = [r.token_ids for r in rows], [r.loss_mask for r in rows]
    pack = shared_prefix_pack(ids, masks, torch.device("cpu"))
    assert pack is not None
    groups, width = pack.input_ids.shape
    assert shared_prefix_pack(ids, masks, torch.device("cpu"), max_mask_elements=groups * width * width) is not None
    assert shared_prefix_pack(ids, masks, torch.device("cpu"), max_mask_elements=groups * width * width - 1) is None


def test_turn_major_order_is_memagents_batch_layout():
    """Episode 0 has three conversations (two memory turns and its answer), episode 1 two, episode 2 one: every
    episode's first memory turn, then the second ones, then every final answer in batch order."""
    from memrl.train.batch import Row
    from memrl.train.update import turn_major

    shape = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0)]
    rows = [Row([1, 2], [0, 1], [0.0, 0.0], e, s) for e, s in shape]
    assert [shape[i] for i in turn_major(rows)] == [(0, 0), (1, 0), (0, 1), (0, 2), (1, 1), (2, 0)]


def test_turn_major_mini_batches_split_as_on_the_originals_gpus():
    """Four episodes of two memory turns and an answer (12 rows, turn-major: t0 x4, t1 x4, answers x4), two
    mini-batches. One GPU: the first six rows, then the last six (answers in the second). Two GPUs: each takes
    six contiguous rows and cuts them in two; mini-batch m is both GPUs' m-th piece."""
    from memrl.train.batch import Row
    from memrl.train.update import turn_major_minis

    rows = [Row([1, 2], [0, 1], [0.0, 0.0], e, s) for e in range(4) for s in range(3)]
    kind = lambda i: f"{'a' if rows[i].step == 2 else 't' + str(rows[i].step)}{rows[i].episode}"  # noqa: E731
    one = [[kind(i) for i in mini] for mini in turn_major_minis(rows, 2, 1)]
    assert one == [["t00", "t01", "t02", "t03", "t10", "t11"], ["t12", "t13", "a0", "a1", "a2", "a3"]]
    two = [[kind(i) for i in mini] for mini in turn_major_minis(rows, 2, 2)]
    assert two == [["t00", "t01", "t02", "t12", "t13", "a0"], ["t03", "t10", "t11", "a1", "a2", "a3"]]
    assert sorted(i for mini in turn_major_minis(rows, 5, 4) for i in mini) == list(range(12))  # every row once


def test_a_turn_major_run_trains_every_conversation_in_its_mini_batches(tmp_path):
    from memrl.models.resolve import load_tokenizer
    from memrl.train.trainer import Trainer
    from tests.train.helpers import coin_engine, config

    cfg = config(tmp_path, trainer__minibatch_order="turn_major", trainer__mini_batches=2, trainer__total_steps=1)
    out = Trainer(cfg, engine=coin_engine(load_tokenizer("tiny"))).run()
    assert out["grad_norm"] > 0 and out.get("skipped_updates", 0.0) == 0.0
