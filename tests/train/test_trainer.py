import json

import pytest
import torch

from memrl.config import ConfigError
from memrl.models.resolve import load_model, load_tokenizer
from memrl.testing import ScriptedEngine
from memrl.train.trainer import NonFiniteLossError, Trainer
from tests.train.helpers import coin_engine, config


def test_trains_logs_and_checkpoints(tmp_path):
    cfg = config(tmp_path)
    tok = load_tokenizer("tiny")
    trainer = Trainer(cfg, engine=coin_engine(tok))
    before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    trainer.run()
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2]
    assert all(m["grad_norm"] > 0 and m["rollout_episodes"] == 8 for m in lines)
    assert {"reward", "num_conversations", "entropy", "clipfrac", "kl", "time/rollout", "tokens_per_s"} <= set(lines[0])
    after = trainer.policy.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step_000001", "step_000002"]
    assert lines[1]["data_position"] == 4  # 2 prompts per step


@pytest.mark.parametrize("mode", ["token-mean", "token-sum", "seq-mean-token-mean"])
def test_micro_batching_gives_the_same_gradient(tmp_path, mode):
    """The aggregate over a mini-batch split into micro-batches == one big batch (a token sum is not rescaled)."""
    grads = []
    for budget in (100_000, 40):
        cfg = config(tmp_path / str(budget), trainer__micro_batch_tokens=budget, algorithm__loss_agg_mode=mode)
        tok = load_tokenizer("tiny")
        trainer = Trainer(cfg, policy=load_model("tiny", device="cpu"), engine=coin_engine(tok, seed=1))
        trajs, _, _ = trainer.rollout()
        from memrl.train.batch import rows_from_trajectories

        rows = rows_from_trajectories(trajs)
        trainer.advantages(trajs, rows)
        captured = {}
        trainer.optimizer.step = lambda: captured.update(  # type: ignore[method-assign]
            {n: p.grad.clone() for n, p in trainer.policy.named_parameters() if p.grad is not None})
        trainer.update(rows)
        grads.append(captured)
    assert grads[0].keys() == grads[1].keys()
    for k in grads[0]:
        torch.testing.assert_close(grads[0][k], grads[1][k], atol=1e-6, rtol=1e-4)


def test_nan_loss_skips_then_stops(tmp_path, monkeypatch):
    import memrl.train.update as U

    real = U.policy_objective
    monkeypatch.setattr(U, "policy_objective", lambda *a, **k: (real(*a, **k)[0] * float("nan"), real(*a, **k)[1]))
    cfg = config(tmp_path, trainer__total_steps=5, trainer__max_nan_steps=2)
    trainer = Trainer(cfg, engine=coin_engine(load_tokenizer("tiny")))
    before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    with pytest.raises(NonFiniteLossError, match="2 steps in a row"):
        trainer.run()
    assert all(torch.equal(before[k], v) for k, v in trainer.policy.state_dict().items())
    assert trainer.scheduler.last_epoch == 2  # verl steps its schedule every update, skipped or not


def test_failing_episodes_are_counted_not_fatal(tmp_path):
    tok = load_tokenizer("tiny")
    calls = {"n": 0}
    inner = coin_engine(tok)

    async def flaky(prompt, params):
        calls["n"] += 1
        if calls["n"] % 7 == 0:
            raise RuntimeError("backend hiccup")
        return await inner.generate(prompt, params)

    eng = ScriptedEngine(lambda p, s: [])
    eng.generate = flaky  # type: ignore[method-assign]
    trainer = Trainer(config(tmp_path, trainer__total_steps=1), engine=eng)
    last = trainer.run()
    assert last["failed_episodes"] > 0 and last["rollout_episodes"] + last["failed_episodes"] == 8


def test_dynamic_sampling_drops_uniform_groups(tmp_path):
    tok = load_tokenizer("tiny")
    enc = lambda t: tok.encode(t, add_special_tokens=False)  # noqa: E731
    import random

    rng = random.Random(0)

    def reply(prompt, params):
        if params.max_new_tokens != 6:
            return [tok.eos_token_id]
        text = tok.decode(prompt)
        # even-indexed questions: always wrong (uniform group); odd: coin flip
        idx = int(text.split("Which letter ")[1].split("?")[0])
        ans = "z" if idx % 2 == 0 else rng.choice("cb")
        return enc("\\boxed{" + ans + "}")

    cfg = config(tmp_path, algorithm__dynamic_sampling=True, algorithm__max_gen_batches=6, trainer__total_steps=1)
    trainer = Trainer(cfg, engine=ScriptedEngine(reply))
    last = trainer.run()
    assert last["dropped_groups"] >= 1 and last["gen_rounds"] >= 2
    assert last["train_rows"] > 0


def test_bad_config_fails_before_work(tmp_path):
    with pytest.raises(ConfigError, match="data.train_file"):
        Trainer(config(tmp_path, data__train_file=str(tmp_path / "missing.jsonl")))
    with pytest.raises(ConfigError, match="algorithm.n >= 2"):
        Trainer(config(tmp_path, algorithm__n=1))
    assert not (tmp_path / "run").exists()


def test_lora_export_matches_policy_logits(tmp_path):
    from transformers import AutoModelForCausalLM

    from memrl.train.export import export_run

    cfg = config(tmp_path, lora__enabled=True, lora__r=4, trainer__total_steps=1, trainer__lr=1e-2,
                 algorithm__kl_coef=0.01)
    tok = load_tokenizer("tiny")
    trainer = Trainer(cfg, engine=coin_engine(tok))
    trainer.run()
    out = export_run(tmp_path / "run", tmp_path / "export")
    plain = AutoModelForCausalLM.from_pretrained(out).eval()
    assert not any("lora" in k for k in plain.state_dict())
    ids = torch.tensor([tok.encode("hello there, the key is", add_special_tokens=False)])
    with torch.no_grad():
        want = trainer.policy(input_ids=ids).logits
        got = plain(input_ids=ids).logits
        base = load_model("tiny", device="cpu")(input_ids=ids).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(got, base, atol=1e-4)  # the adapter really changed the model


def test_dr_grpo_length_without_a_workflow_length_is_the_updates_not_a_micro_batchs():
    """seq-mean-token-sum-norm with neither algorithm.loss_scale_factor nor a workflow norm_tokens(): each
    micro-batch divided by its own width, so two ranks (or micro-batches) gave another gradient than one."""
    from types import SimpleNamespace

    from memrl.rl.losses import loss_aggregation
    from memrl.train.update import PolicyUpdate

    loss = torch.randn(2, 10)
    mask = torch.zeros(2, 10)
    mask[0, 2:5], mask[1, 1:9] = 1, 1
    rows = [SimpleNamespace(loss_mask=[0] + [int(v) for v in m]) for m in mask]
    me = SimpleNamespace(norm_length=None, dist=SimpleNamespace(active=False))
    normed = loss_aggregation("seq-mean-token-sum-norm").normed
    length = PolicyUpdate._norm_length(me, rows, normed)  # type: ignore[arg-type]
    assert length == 8  # row 1's span, the widest
    agg = loss_aggregation("seq-mean-token-sum-norm")
    whole = agg(loss, mask, length)
    split = sum(agg(loss[i:i + 1], mask[i:i + 1], length) / 2 for i in range(2))
    torch.testing.assert_close(whole, split)
    assert not torch.allclose(whole, sum(agg(loss[i:i + 1], mask[i:i + 1], None) / 2 for i in range(2)))
    assert PolicyUpdate._norm_length(SimpleNamespace(norm_length=32), rows, normed) == 32  # type: ignore[arg-type]
    means = loss_aggregation("token-mean").normed  # no length to find: no pass over the rows
    assert PolicyUpdate._norm_length(SimpleNamespace(norm_length=None), rows, means) is None  # type: ignore[arg-type]
