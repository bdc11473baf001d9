"""Response-only log-probs (decoder + chunked LM head) give the loss and gradients of the whole-model path."""

from __future__ import annotations

import copy

import pytest
import torch

from memrl.config.schema import LoraConfig
from memrl.models.resolve import load_model
from memrl.rl.losses import agg_loss, compute_policy_loss, kl_penalty
from memrl.train.batch import Row, collate, token_logprobs
from memrl.train.logits import response_logprobs, split_head
from memrl.train.policy import add_lora


def _rows(vocab: int, seed: int = 0) -> list[Row]:
    """Rows of different lengths: a prompt (mask 0), then generated tokens (mask 1) with a gap inside one."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for prompt, gen in ((7, 5), (12, 9), (4, 3)):
        ids = torch.randint(0, vocab, (prompt + gen,), generator=g).tolist()
        mask = [0] * prompt + [1] * gen
        if gen > 4:
            mask[prompt + 2] = 0  # e.g. a tool observation between two generated spans
        rows.append(Row(ids, mask, [0.0] * len(ids), episode=0, step=0))
    return rows


def _objective(model, batch, temperature: float, fast: bool, chunk: int | None, ref: torch.Tensor,
               old: torch.Tensor, adv: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    if fast and chunk is not None:
        logp, ent = response_logprobs(model, batch, temperature, with_entropy=True, chunk_elements=chunk)
    else:
        logp, ent = token_logprobs(model, batch, temperature, with_entropy=True, response_only=fast)
    mask = batch.loss_mask
    pg, clipfrac, ppo_kl, _ = compute_policy_loss(old, logp, adv, mask, cliprange_low=0.2, cliprange_high=0.28,
                                                  clip_ratio_c=3.0, loss_agg_mode="token-mean")
    ent_mean = agg_loss(ent, mask, "token-mean")
    kl = agg_loss(kl_penalty(logp, ref, "low_var_kl"), mask, "token-mean")
    loss = pg - 0.01 * ent_mean + 0.1 * kl
    return loss, {"entropy": ent_mean.detach(), "kl": kl.detach(), "clipfrac": clipfrac, "ppo_kl": ppo_kl}


def _model(lora: bool, checkpointing: bool = False):
    torch.manual_seed(0)
    model = load_model("tiny", device="cpu", dtype="float32")
    if checkpointing:  # as build_policy does for trainer.gradient_checkpointing
        getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
    if lora:
        lora_cfg = LoraConfig(enabled=True, r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj"])
        model = add_lora(model, lora_cfg)
        for name, p in model.named_parameters():  # B starts at zero: make the adapter do something
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.05)
    return model.train()


@pytest.mark.parametrize("lora,checkpointing", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("chunk", [None, 64])  # None: one chunk; 64 logits: a checkpointed chunk per token
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_response_only_matches_whole_model(lora, checkpointing, chunk, temperature):
    model = _model(lora, checkpointing)
    vocab = model.get_input_embeddings().num_embeddings
    batch = collate(_rows(vocab), pad_id=0, device=torch.device("cpu"))
    g = torch.Generator().manual_seed(1)
    shape = batch.targets.shape
    ref = -torch.rand(shape, generator=g) * 3
    adv = torch.randn(shape, generator=g)
    with torch.no_grad():  # old log-probs near the current ones, so some ratios clip
        old_full, _ = token_logprobs(model, batch, temperature)
        old = old_full + 0.3 * torch.randn(shape, generator=g)
    results = []
    for fast in (False, True):
        model.zero_grad(set_to_none=True)
        loss, metrics = _objective(model, batch, temperature, fast, chunk, ref, old, adv)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((loss.detach(), metrics, grads))
    (loss0, m0, g0), (loss1, m1, g1) = results
    torch.testing.assert_close(loss1, loss0, atol=1e-5, rtol=1e-5)
    for key in m0:
        torch.testing.assert_close(m1[key], m0[key], atol=1e-5, rtol=1e-5)
    assert g0.keys() == g1.keys() and len(g0) > 0
    if lora:
        assert all("lora_" in n for n in g0)  # adapters stayed active, the base stayed frozen
    for name in g0:
        torch.testing.assert_close(g1[name], g0[name], atol=1e-5, rtol=1e-5)


def test_response_only_values_at_generated_positions_and_zero_elsewhere():
    model = _model(False).eval()
    batch = collate(_rows(model.config.vocab_size, seed=2), pad_id=0, device=torch.device("cpu"))
    with torch.no_grad():
        full, ent_full = token_logprobs(model, batch, 0.9, with_entropy=True)
        fast, ent_fast = response_logprobs(model, batch, 0.9, with_entropy=True, chunk_elements=1)
    mask = batch.loss_mask > 0
    torch.testing.assert_close(fast[mask], full[mask], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent_fast[mask], ent_full[mask], atol=1e-5, rtol=1e-5)
    assert torch.all(fast[~mask] == 0) and torch.all(ent_fast[~mask] == 0)


def test_reference_through_disabled_adapter_matches():
    model = _model(True).eval()
    batch = collate(_rows(model.get_input_embeddings().num_embeddings, seed=3), pad_id=0, device=torch.device("cpu"))
    with torch.no_grad(), model.disable_adapter():
        full, _ = token_logprobs(model, batch)
        fast, _ = token_logprobs(model, batch, response_only=True)
    with torch.no_grad():
        active, _ = token_logprobs(model, batch, response_only=True)
    mask = batch.loss_mask > 0
    torch.testing.assert_close(fast[mask], full[mask], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(active[mask], fast[mask])  # the adapter is really off only inside the context


def test_models_with_logit_transforms_take_the_whole_model_path():
    model = _model(False)
    assert split_head(model) is not None
    capped = copy.deepcopy(model)
    capped.config.final_logit_softcapping = 30.0
    assert split_head(capped) is None
    batch = collate(_rows(model.config.vocab_size), pad_id=0, device=torch.device("cpu"))
    assert response_logprobs(capped, batch) is None


@pytest.mark.parametrize("lora", [False, True])
def test_trainer_update_gradients_and_metrics_equal_whole_model_path(tmp_path, monkeypatch, lora):
    """Old and reference log-prob passes, KL, entropy bonus, two PPO epochs: same gradients and metrics."""
    import memrl.train.trainer as T
    import memrl.train.update as U
    from memrl.models.resolve import load_tokenizer
    from memrl.train.batch import rows_from_trajectories
    from tests.train.helpers import coin_engine, config

    real = U.token_logprobs
    outcomes = []
    for fast in (True, False):
        monkeypatch.setattr(U, "token_logprobs", lambda *a, **k: real(*a, **{**k, "response_only": fast}))
        over = {"algorithm__kl_coef": 0.1, "algorithm__entropy_coef": 0.01, "algorithm__ppo_epochs": 2,
                "lora__enabled": lora, "lora__r": 4}
        cfg = config(tmp_path / f"{fast}", **over)
        trainer = T.Trainer(cfg, engine=coin_engine(load_tokenizer("tiny"), seed=1))
        trajs, _, _ = trainer.rollout()
        rows = rows_from_trajectories(trajs)
        trainer.advantages(trajs, rows)
        grads: list[dict[str, torch.Tensor]] = []
        step = trainer.optimizer.step

        def capture(step=step, grads=grads, trainer=trainer):
            grads.append({n: p.grad.clone() for n, p in trainer.policy.named_parameters() if p.grad is not None})
            step()

        trainer.optimizer.step = capture  # type: ignore[method-assign]
        metrics = trainer.update(rows)
        outcomes.append((grads, metrics))
    (g_fast, m_fast), (g_full, m_full) = outcomes
    assert len(g_fast) == len(g_full) == 2  # one optimizer step per epoch
    for a, b in zip(g_fast, g_full):
        assert a.keys() == b.keys() and a
        for name in a:
            torch.testing.assert_close(a[name], b[name], atol=1e-5, rtol=1e-5)
    for key in ("pg_loss", "entropy", "kl", "ppo_kl", "clipfrac", "logprob_mismatch"):
        assert m_fast[key] == pytest.approx(m_full[key], abs=1e-5, rel=1e-5)
