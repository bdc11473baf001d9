"""``memrl sft``'s loss and optimizer, against TRL's SFTTrainer (``assistant_only_loss``): the summed target
log-likelihood over the batch's trained targets (a generated first token is none), AdamW without decay on
biases and norm weights, float32 weights by default."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from memrl.cli.main import app
from memrl.models.resolve import load_model
from memrl.train.sft import sft
from memrl.types import Conversation, Trajectory


def traj(ids: list[int], mask: list[int]) -> Trajectory:
    conv = Conversation(token_ids=ids, loss_mask=mask, logprobs=[0.0] * len(ids))
    return Trajectory(conversations=[conv], reward=1.0, sample_id="s", group_id="g")


def test_the_loss_is_the_mean_over_targets_and_a_first_generated_token_is_none():
    policy = load_model("tiny", "float32", "cpu")
    rows = [traj([5, 6, 7, 8], [0, 0, 1, 1]), traj([9, 10, 11], [1, 1, 1])]  # the second: no prompt at all
    with torch.no_grad():
        total, count = 0.0, 0
        for t in rows:
            ids = torch.tensor([t.conversations[0].token_ids])
            logp = torch.log_softmax(policy(ids).logits[0, :-1].float(), -1)
            picked = logp.gather(-1, ids[0, 1:, None])[:, 0]
            mask = torch.tensor(t.conversations[0].loss_mask[1:], dtype=torch.float32)
            total -= float((picked * mask).sum())
            count += int(mask.sum())
    assert count == 4  # 2 + 2: token 9 is generated but nothing precedes it
    (loss,) = sft(policy, rows, lr=1e-9, batch_rows=2)
    assert loss == pytest.approx(total / count, rel=1e-5)


def test_weight_decay_spares_biases_and_norm_weights():
    runs = {}
    for wd in (0.0, 0.5):
        policy = load_model("tiny", "float32", "cpu")
        sft(policy, [traj([5, 6, 7, 8, 9], [0, 0, 1, 1, 1])], lr=1e-2, weight_decay=wd, decay_biases_and_norms=False,
            batch_rows=1)
        runs[wd] = dict(policy.named_parameters())
    flat = [n for n, p in runs[0.0].items() if p.ndim < 2]
    square = [n for n, p in runs[0.0].items() if p.ndim >= 2]
    assert flat and any("norm" in n for n in flat)
    assert all(torch.equal(runs[0.0][n], runs[0.5][n]) for n in flat)  # same gradient, no decay
    assert any(not torch.equal(runs[0.0][n], runs[0.5][n]) for n in square)


@pytest.mark.parametrize("schedule", ["constant", "linear"])
def test_the_learning_rate_of_each_step_is_transformers_schedule(monkeypatch, schedule):
    """linear = TRL's default (``get_linear_schedule_with_warmup``, no warmup) over every step of every epoch."""
    from transformers import get_constant_schedule, get_linear_schedule_with_warmup

    seen: list[float] = []
    real_step = torch.optim.AdamW.step

    def step(self, *a, **k):
        seen.append(self.param_groups[0]["lr"])
        return real_step(self, *a, **k)

    monkeypatch.setattr(torch.optim.AdamW, "step", step)
    rows = [traj([5, 6, 7, 8], [0, 0, 1, 1])] * 5
    sft(load_model("tiny", "float32", "cpu"), rows, lr=3e-3, batch_rows=2, epochs=2, schedule=schedule)
    ref = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=3e-3)
    sched = get_constant_schedule(ref) if schedule == "constant" else get_linear_schedule_with_warmup(ref, 0, 6)
    want = []
    for _ in range(6):
        want.append(ref.param_groups[0]["lr"])
        ref.step()
        sched.step()
    assert len(seen) == 6 and seen == pytest.approx(want, rel=1e-12)
    assert (seen[-1] < seen[0]) == (schedule == "linear")


@pytest.mark.parametrize("flag, why", [(["--dtype", "fp8"], "--dtype must be float32, bfloat16, float16 or auto"),
                                       (["--weight-decay", "-1"], "--weight-decay must be >= 0"),
                                       (["--lr-schedule", "cosine"], "--lr-schedule must be constant or linear")])
def test_bad_optimizer_flags_are_one_line(tmp_path, flag, why):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(traj([5, 6, 7], [0, 1, 1]).to_dict()) + "\n")
    r = CliRunner().invoke(app, ["sft", "--trajectories", str(path), "--model", "tiny", "--out", str(tmp_path / "o"),
                                 *flag])
    assert r.exit_code == 2 and why in r.output and "Traceback" not in r.output
    assert not (tmp_path / "o").exists()


def test_a_chat_format_row_says_what_memrl_reads_instead(tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    r = CliRunner().invoke(app, ["sft", "--trajectories", str(path), "--model", "tiny", "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "chat-format row (TRL's messages / prompt-completion)" in r.output


def test_progress_says_the_step_of_how_many(tmp_path):
    """sft's progress lines name the total (and the last step), on stderr: stdout carries the result."""
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(traj([5, 6, 7], [0, 1, 1]).to_dict()) + "\n" for _ in range(3)))
    r = CliRunner().invoke(app, ["sft", "--trajectories", str(path), "--model", "tiny", "--out", str(tmp_path / "o"),
                                 "--batch-rows", "1", "--epochs", "4"])
    assert r.exit_code == 0, r.output
    assert "sft step 10/12: loss " in r.stderr and "sft step 12/12: loss " in r.stderr
    assert "sft step" not in r.stdout
