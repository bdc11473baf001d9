"""``algorithm.mask_truncated_completions``: TRL's option (GRPOConfig.mask_truncated_completions), on memrl's
conversations: one whose last model turn ran out of tokens weighs nothing in the loss, as TRL zeroes the
completion mask of a completion that does not end in EOS (trl/trainer/grpo_trainer.py, "If
mask_truncated_completions is enabled, zero out truncated completions")."""

from __future__ import annotations

import asyncio

import pytest

from memrl.engines.base import SamplingParams
from memrl.models.resolve import load_tokenizer
from memrl.testing import ScriptedEngine
from memrl.train.batch import mask_truncated_rows, rows_from_trajectories
from memrl.train.trainer import Trainer
from memrl.types import Conversation, Trajectory
from memrl.workflows.api import Episode
from tests.train.helpers import coin_engine, config


def _conv(finish: str) -> Conversation:
    return Conversation.from_prompt_response([1, 2, 3], [4, 5], [-0.1, -0.2], meta={"finish": finish})


def test_a_conversation_cut_at_its_budget_keeps_its_row_with_nothing_to_train():
    traj = Trajectory(conversations=[_conv("stop"), _conv("length"), _conv("abort")], reward=1.0, sample_id="s",
                      group_id="g")
    off = rows_from_trajectories([traj])
    on = rows_from_trajectories([traj])
    assert mask_truncated_rows(on, [traj]) == 1
    assert [r.loss_mask for r in off] == [[0, 0, 0, 1, 1]] * 3
    assert [r.loss_mask for r in on] == [[0, 0, 0, 1, 1], [0] * 5, [0, 0, 0, 1, 1]]
    assert [r.generated for r in on] == [None, [0, 0, 0, 1, 1], None]  # Dr. GRPO's width still spans it
    assert [r.token_ids for r in on] == [r.token_ids for r in off]  # still a sequence of the batch


def test_a_merged_conversation_is_truncated_by_its_last_turn():
    """ep.generate(merge=True) extends a conversation: its finish is the latest turn's, not the first's."""
    tok = load_tokenizer("tiny")
    budgets = iter([2, 50])
    engine = ScriptedEngine(lambda prompt, params: [7] * 10)  # no stop token: cut at the budget, or not
    ep = Episode({}, engine=engine, tokenizer=tok, sampling=SamplingParams(), workflow="t", sample_id="s")

    async def go():
        first = await ep.generate([5, 6], max_new_tokens=next(budgets))
        second = await ep.generate(first.prompt_ids + first.token_ids + [8], max_new_tokens=next(budgets),
                                   merge=True)
        return first, second

    first, second = asyncio.run(go())
    assert (first.truncated, second.truncated) == (True, False)
    assert len(ep.conversations) == 1 and ep.conversations[0].meta["finish"] == "stop"


def test_a_step_masks_the_truncated_conversations_and_says_how_many(tmp_path):
    """MemAgent with 3-token memory turns: the memory turns that fill their budget are masked (the final answers,
    which end with EOS, are not); the update runs and trains only the rest."""
    tok = load_tokenizer("tiny")
    coin = coin_engine(tok)
    rambling = tok.encode("the notes go on and on", add_special_tokens=False)  # no EOS: cut at 3 tokens

    def reply(prompt, params):
        if params.max_new_tokens == 6:  # the final answer
            return coin.reply(prompt, params)
        return rambling if len(prompt) % 2 else [tok.eos_token_id]  # some memory turns end, some are cut

    cfg = config(tmp_path, algorithm__mask_truncated_completions=True, trainer__total_steps=1,
                 trainer__rollouts_per_step=8)
    trainer = Trainer(cfg, engine=ScriptedEngine(reply))
    metrics = trainer.train_step()
    rows = rows_from_trajectories(trainer.step_trajectories)
    mask_truncated_rows(rows, trainer.step_trajectories)
    masked = [r for r in rows if r.num_response == 0]
    assert 0 < len(masked) < len(rows)
    assert metrics["masked_truncated"] == len(masked) / len(rows)
    assert metrics["train_tokens"] == sum(r.num_response for r in rows)
    assert metrics["pg_loss"] == metrics["pg_loss"]  # finite: the all-zero rows add nothing, divide nothing
    # the saved rollouts say which conversations the loss left out (they carry no advantage)
    import json

    (path,) = (trainer.run_dir / "rollouts").glob("step_*.jsonl")
    saved = [json.loads(line) for line in path.read_text().splitlines()]
    convs = [c for rec in saved for c in rec["conversations"]]
    flagged = [c for c in convs if c.get("masked_truncated")]
    assert flagged and all(c["meta"]["finish"] == "length" and "advantage" not in c for c in flagged)
    assert all(not c.get("masked_truncated") for c in convs if c["meta"].get("finish") != "length")


def test_the_loss_over_masked_rows_is_trls_for_each_loss_type():
    """Three completions, the second cut at its budget. TRL (grpo_trainer.py at f2cd577) zeroes its completion
    mask and then takes, per loss_type: grpo the mean over rows of each row's token mean (a masked row
    counts, as 0), bnpo/dapo the mean over the batch's unmasked tokens, dr_grpo the sum over B x
    max_completion_length. memrl's masked rows under the matching loss_agg_mode give the same numbers."""
    import torch

    from memrl.rl.losses import agg_loss

    prompt, responses, finish = [1, 2, 3], [[4, 5], [6, 7, 8, 9], [10, 11, 12]], ["stop", "length", "stop"]
    per_token = [[0.5, -1.0], [2.0, 3.0, -4.0, 1.5], [0.25, 0.75, -0.5]]
    eos, width = 99, 4
    # TRL's side: completions padded right, is_truncated = last token not EOS/pad
    completions = [r[:-1] + [eos] if f == "stop" else r for r, f in zip(responses, finish)]
    trl_mask = torch.tensor([[1.0] * len(c) + [0.0] * (width - len(c)) for c in completions])
    trl_mask *= torch.tensor([[0.0] if c[-1] != eos else [1.0] for c in completions])
    trl_loss = torch.tensor([p + [0.0] * (width - len(p)) for p in per_token])
    trl = {"grpo": ((trl_loss * trl_mask).sum(-1) / trl_mask.sum(-1).clamp(min=1.0)).mean(),
           "bnpo": (trl_loss * trl_mask).sum() / trl_mask.sum().clamp(min=1.0),
           "dr_grpo": (trl_loss * trl_mask).sum() / (trl_loss.size(0) * width)}
    # memrl's side: one row per conversation, prompt and response, the loss at the response positions
    convs = [Conversation.from_prompt_response(prompt, r, [0.0] * len(r), meta={"finish": f})
             for r, f in zip(responses, finish)]
    trajs = [Trajectory(convs, 0.0, "s", "g")]
    rows = rows_from_trajectories(trajs)
    mask_truncated_rows(rows, trajs)
    longest = max(len(r) for r in rows)
    mask = torch.tensor([r.loss_mask + [0] * (longest - len(r)) for r in rows], dtype=torch.float32)
    loss = torch.tensor([[0.0] * len(prompt) + p + [0.0] * (longest - len(prompt) - len(p)) for p in per_token])
    ours = {"grpo": agg_loss(loss, mask, "seq-mean-token-mean"), "bnpo": agg_loss(loss, mask, "token-mean"),
            "dr_grpo": agg_loss(loss, mask, "seq-mean-token-sum-norm", norm_length=width)}
    for kind in trl:
        assert float(ours[kind]) == pytest.approx(float(trl[kind]), abs=1e-7), kind
    # by hand: rows 1 and 3 weigh, row 2 counts as a sequence only
    assert float(ours["grpo"]) == pytest.approx(((0.5 - 1.0) / 2 + 0 + (0.25 + 0.75 - 0.5) / 3) / 3)
    assert float(ours["bnpo"]) == pytest.approx((0.5 - 1.0 + 0.25 + 0.75 - 0.5) / 5)



def test_dr_grpo_divides_by_the_width_the_masked_row_spans():
    """TRL divides dr_grpo by its constant max_completion_length; memrl without a configured L by the batch's
    widest response span, which a masked row (the longest here) still spans."""
    from types import SimpleNamespace

    from memrl.train.update import PolicyUpdate

    convs = [Conversation.from_prompt_response([1, 2, 3], r, [0.0] * len(r), meta={"finish": f})
             for r, f in (([4, 5], "stop"), ([6, 7, 8, 9], "length"), ([10, 11, 12], "stop"))]
    trajs = [Trajectory(convs, 0.0, "s", "g")]
    rows = rows_from_trajectories(trajs)
    stub = SimpleNamespace(norm_length=None, dist=SimpleNamespace(active=False))
    before = PolicyUpdate._norm_length(stub, rows, True)
    mask_truncated_rows(rows, trajs)
    assert PolicyUpdate._norm_length(stub, rows, True) == before == 4


@pytest.mark.parametrize("estimator", ["reinforce_plus_plus", "reinforce_plus_plus_baseline"])
def test_a_step_whose_every_turn_is_cut_trains_nothing_and_does_not_fail(tmp_path, estimator):
    """The advantages are computed before the masking (TRL scores, then masks): REINFORCE++'s whitening over
    the step's tokens found none and raised when every row was masked first."""
    tok = load_tokenizer("tiny")
    rambling = tok.encode("the notes go on and on and on", add_special_tokens=False)  # every turn cut
    cfg = config(tmp_path, algorithm__mask_truncated_completions=True, algorithm__adv_estimator=estimator,
                 trainer__total_steps=1)
    metrics = Trainer(cfg, engine=ScriptedEngine(lambda prompt, params: rambling)).train_step()
    assert metrics["masked_truncated"] == 1.0 and metrics["train_tokens"] == 0 and metrics["pg_loss"] == 0.0
