"""On-policy distillation in the trainer: a tiny teacher (another seed) scores each conversation in its own
context; MemAgent trains 2 steps with it; the reverse KL falls when the student trains on a fixed batch."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from memrl.config import ConfigError, MemRLConfig
from memrl.dist.ddp import DistContext
from memrl.models.resolve import load_model, load_tokenizer
from memrl.models.tiny import build_tiny_model
from memrl.train.batch import Row, rows_from_trajectories
from memrl.train.policy import Reference
from memrl.train.setup import build_optimizer
from memrl.train.teacher import HFTeacher, Teacher, check_same_vocabulary
from memrl.train.trainer import Trainer
from memrl.train.update import PolicyUpdate
from tests.train.helpers import config


@pytest.fixture(scope="module")
def teacher_path(tmp_path_factory):
    """The tiny model's shape and tokenizer, other weights (seed 1; ``tiny`` is seed 0), and confident: its final
    norm scaled x5, so its next-token distributions are peaked where the random student's are near uniform (a
    reverse KL of 0.6 nats/token instead of 0.03, which the student closes step by step)."""
    path = build_tiny_model(tmp_path_factory.mktemp("teacher") / "tiny-seed1", seed=1)
    model = load_model(str(path), dtype="float32", device="cpu")
    with torch.no_grad():
        model.model.norm.weight.mul_(5.0)
    model.save_pretrained(path)
    return str(path)


def _alone(model, row: Row, temperature: float) -> torch.Tensor:
    """The teacher's log-probs of one row's tokens, computed on that row alone (whole-model forward)."""
    ids = torch.tensor([row.token_ids])
    logits = model(input_ids=ids).logits[0, :-1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0]


@pytest.mark.timeout(300)
def test_memagent_trains_two_steps_and_each_conversation_is_scored_in_its_own_context(tmp_path, teacher_path):
    cfg = config(tmp_path, teacher__model=teacher_path, trainer__total_steps=2, trainer__prompts_per_step=1,
                 algorithm__n=2, sampling__temperature=0.8)
    trainer = Trainer(cfg)
    trainer.run()
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    kls = [line["distill/reverse_kl"] for line in lines if "train_rows" in line]
    assert len(kls) == 2 and all(math.isfinite(k) and k != 0 for k in kls)
    trajs, _, _ = trainer.rollout()  # one more step by hand, to read the rows
    rows = rows_from_trajectories(trajs)
    trainer.advantages(trajs, rows)
    assert max(r.step for r in rows) >= 2  # MemAgent: several conversations per episode
    trainer.update(rows)
    model = trainer.updater.teacher.scorer.model
    for r in rows:
        mask = torch.tensor(r.loss_mask[1:], dtype=torch.float32)
        want = -(r.old_logprobs - _alone(model, r, 0.8)) * mask  # replace mode, weight 1
        assert torch.allclose(r.advantages, want, atol=1e-5), r.step


def _fixed_rows(policy, tokenizer, n: int = 6, new: int = 12) -> list[Row]:
    """``n`` responses the student sampled (seeded) to one prompt: a batch the test trains on repeatedly."""
    prompt = tokenizer.encode("Memory: the key is 42 and the value is blue. Question:")
    torch.manual_seed(0)
    out = policy.generate(torch.tensor([prompt] * n), do_sample=True, max_new_tokens=new, min_new_tokens=new,
                          top_k=0, pad_token_id=tokenizer.pad_token_id)
    rows = []
    for i, ids in enumerate(out.tolist()):
        mask = [0] * len(prompt) + [1] * new
        rows.append(Row(ids, mask, [0.0] * len(ids), episode=i, step=0))
        rows[-1].advantages = torch.zeros(len(ids) - 1)
    return rows


@pytest.mark.timeout(120)
def test_reverse_kl_falls_over_ten_steps_on_a_fixed_batch(teacher_path):
    cfg = MemRLConfig.model_validate({"model": {"path": "tiny"}, "teacher": {"model": teacher_path},
                                      "trainer": {"lr": 1e-3, "seed": 0}, "engine": {"device": "cpu"}})
    tokenizer = load_tokenizer("tiny")
    torch.manual_seed(0)
    policy = load_model("tiny", dtype="float32", device="cpu")
    optimizer, scheduler = build_optimizer(cfg, policy)
    scorer = HFTeacher(load_model(teacher_path, dtype="float32", device="cpu"), tokenizer.pad_token_id, 16384)
    update = PolicyUpdate(cfg, policy, optimizer, scheduler, Reference(policy, False), DistContext(), sharded=False,
                          pad_id=tokenizer.pad_token_id, device=torch.device("cpu"), teacher=Teacher(cfg, scorer))
    rows = _fixed_rows(policy, tokenizer)
    kls = [update(copy.deepcopy(rows), step)["distill/reverse_kl"] for step in range(1, 11)]
    # measured: 0.64, 0.54, 0.46, 0.39, 0.32, 0.26, 0.19, 0.14, 0.10, 0.074 (each before that step's update)
    assert kls[0] > 0.3  # the student's own samples: the confident teacher finds them less likely
    assert all(b < a for a, b in zip(kls, kls[1:])), kls
    assert kls[-1] < 0.25 * kls[0], kls


def test_add_mode_adds_the_weighted_signal_and_engine_student_reads_sampling_logprobs():
    class Fixed:
        def logprobs(self, rows, temperature):
            return [torch.tensor([-9.0, -1.0, -2.0])]

    row = Row([1, 2, 3, 4], [0, 0, 1, 1], [0.0, 0.0, -1.5, -0.5], episode=0, step=0)
    row.advantages = torch.tensor([0.0, 0.3, 0.3])
    cfg = MemRLConfig.model_validate({"teacher": {"model": "tiny", "mode": "add", "weight": 0.5,
                                                  "student": "engine"}})
    metrics = Teacher(cfg, Fixed()).apply([row], 1.0)
    # engine log-probs at targets [0, -1.5, -0.5]; minus teacher [_, -1, -2] = [_, -0.5, 1.5]
    assert torch.allclose(row.advantages, torch.tensor([0.0, 0.3 + 0.25, 0.3 - 0.75]))
    assert metrics["distill/reverse_kl"] == pytest.approx(0.5)


def test_teacher_temperature_sets_where_the_teacher_scores():
    """tinker-cookbook and TRL's GKD score the teacher's own distribution (T 1) whatever the sampling temperature."""
    seen = []

    class Fixed:
        def logprobs(self, rows, temperature):
            seen.append(temperature)
            return [torch.tensor([-9.0, -1.0, -2.0])]

    def row():
        return Row([1, 2, 3, 4], [0, 0, 1, 1], [0.0, 0.0, -1.5, -0.5], episode=0, step=0)

    for options in ({}, {"temperature": 1.0}):
        cfg = MemRLConfig.model_validate({"teacher": {"model": "tiny", "student": "engine", **options}})
        Teacher(cfg, Fixed()).apply([row()], 0.7)
    assert seen == [0.7, 1.0]
    with pytest.raises(ValueError, match=r"teacher\.temperature is set but teacher\.model is not"):
        MemRLConfig.model_validate({"teacher": {"temperature": 1.0}})


def test_teacher_options_without_a_teacher_and_other_vocabularies_are_refused():
    with pytest.raises(ValueError, match=r"teacher\.weight is set but teacher\.model is not"):
        MemRLConfig.model_validate({"teacher": {"weight": 2.0}})
    MemRLConfig.model_validate(MemRLConfig().model_dump(mode="json"))  # a dumped config (defaults) loads
    with pytest.raises(ValueError, match=r"algorithm\.dynamic_sampling would drop the groups"):
        MemRLConfig.model_validate({"teacher": {"model": "tiny"}, "algorithm": {"dynamic_sampling": True}})
    MemRLConfig.model_validate({"teacher": {"model": "tiny", "mode": "add"}, "algorithm": {"dynamic_sampling": True}})
    with pytest.raises(ValueError, match="unknown teacher engine kind 'hff'"):
        MemRLConfig.model_validate({"teacher": {"model": "tiny", "engine": "hff"}})
    other = copy.deepcopy(load_tokenizer("tiny"))
    other.add_tokens(["<extra>"])
    with pytest.raises(ConfigError, match=r"teacher\.model='x': its tokenizer's vocabulary differs"):
        check_same_vocabulary(load_tokenizer("tiny"), other, "x")


def test_config_schema_names_the_teacher_section():
    from typer.testing import CliRunner

    from memrl.cli.main import app

    r = CliRunner().invoke(app, ["config", "schema", "--format", "json"])
    assert r.exit_code == 0, r.output
    by_key = {row["key"]: row for row in json.loads(r.stdout) if row["workflow"] is None}
    assert {"teacher.model", "teacher.engine", "teacher.mode", "teacher.weight"} <= set(by_key)
    assert by_key["teacher.model"]["default"] is None and "hf" in by_key["teacher.engine"]["choices"]
    assert by_key["teacher.mode"]["default"] == "replace"


def _fake_vllm(model):
    """An httpx transport answering /v1/completions as vLLM does with prompt_logprobs=0, from ``model``."""
    import httpx

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        assert request.url.path == "/v1/completions" and body["prompt_logprobs"] == 0 and body["max_tokens"] == 1
        ids = body["prompt"]
        with torch.no_grad():
            row = Row(ids, [1] * len(ids), [0.0] * len(ids), 0, 0)
            lps = _alone(model, row, 1.0).tolist()
        entries = [None] + [{str(tok): {"logprob": lp, "rank": 1, "decoded_token": "?"}}
                            for tok, lp in zip(ids[1:], lps)]
        return httpx.Response(200, json={"choices": [{"text": "x", "prompt_logprobs": entries}]})

    return httpx.MockTransport(handle)


def test_openai_teacher_reads_vllm_prompt_logprobs_equal_to_the_hf_teacher(teacher_path):
    from memrl.train.teacher_http import OpenAITeacher

    model = load_model(teacher_path, dtype="float32", device="cpu")
    tokenizer = load_tokenizer("tiny")
    ids = [tokenizer.encode(text) for text in ("the key is 42", "Memory: the value is blue. Question: what is it?")]
    rows = [Row(x, [0, 0] + [1] * (len(x) - 2), [0.0] * len(x), 0, 0) for x in ids]  # two prompt tokens
    served = OpenAITeacher("http://teacher/v1", "t", "k", transport=_fake_vllm(model)).logprobs(rows, 1.0)
    local = HFTeacher(model, tokenizer.pad_token_id, 16384).logprobs(rows, 1.0)
    for r, a, b in zip(rows, served, local):
        mask = torch.tensor(r.loss_mask[1:], dtype=torch.bool)
        assert a.shape == b.shape and torch.allclose(a[mask], b[mask], atol=1e-5)


def test_openai_teacher_needs_a_base_url_and_temperature_one(teacher_path):
    from memrl.train.teacher import openai_teacher

    with pytest.raises(ValueError, match=r"teacher\.base_url is required with teacher\.engine=openai"):
        MemRLConfig.model_validate({"teacher": {"model": "tiny", "engine": "openai"}})
    cfg = MemRLConfig.model_validate({"teacher": {"model": teacher_path, "engine": "openai",
                                                  "base_url": "http://teacher/v1"}, "sampling": {"temperature": 0.7}})
    with pytest.raises(ConfigError, match=r"teacher\.engine=openai: .* score at temperature 1 \(it would at 0\.7\)"):
        openai_teacher(cfg, load_tokenizer("tiny"), torch.device("cpu"))
