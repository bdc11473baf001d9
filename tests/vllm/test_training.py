"""Training on vLLM in-process: asynchronous mode overlaps and syncs; the engine serves the trained policy."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("vllm", reason="vLLM not installed: `make test-vllm` runs these with vLLM's CPU build")

import yaml  # noqa: E402

from memrl.config import MemRLConfig  # noqa: E402
from memrl.engines.base import SamplingParams  # noqa: E402
from memrl.engines.hf import HFEngine  # noqa: E402
from memrl.train.policy import merged_state_dict  # noqa: E402
from tests.vllm.helpers import memrl, read_metrics, train_config  # noqa: E402


def test_async_training_on_vllm_overlaps_and_syncs(tmp_path):
    """trainer.mode=async with vLLM in-process: episodes generate during updates, each piece tagged with
    its policy version, and every update reaches the engine."""
    path = tmp_path / "exp.yaml"
    cfg = train_config(tmp_path, 3)
    cfg["trainer"]["mode"] = "async"
    cfg["trainer"]["async"].update(max_staleness=1, partial_chunk_tokens=2)
    path.write_text(yaml.safe_dump(cfg))
    r = memrl("train", path)
    assert r.returncode == 0, r.stderr[-3000:]
    # every training step has a row; async `reward` averages only the episodes that finished during the
    # step's span, so a step whose groups were all buffered before the previous one has none
    rows = [m for m in read_metrics(tmp_path / "run") if "train_rows" in m]
    assert [m["step"] for m in rows] == [1, 2, 3] and any("reward" in m for m in rows)
    for m in rows:
        assert m["sync_mb"] > 0 and m["train_rows"] > 0
        assert m["async/staleness_0"] + m["async/staleness_1"] > 0 and m["async/dropped_stale"] == 0
    records = [json.loads(x) for f in sorted((tmp_path / "run" / "rollouts").glob("*.jsonl"))
               for x in f.read_text().splitlines()]
    versions = {v for rec in records for _, v in rec["info"]["policy_versions"]}
    assert versions <= {0, 1, 2} and len(versions) >= 2  # later steps trained on pieces of newer weights


def test_trained_policy_and_engine_agree(tmp_path):
    """After in-process training, the vLLM engine serves exactly the trained (merged LoRA) policy."""
    from memrl.train.trainer import Trainer

    cfg = MemRLConfig.model_validate(train_config(tmp_path, 2, lora__enabled=True, lora__r=8))
    trainer = Trainer(cfg)
    try:
        prompts = [[5, 6, 7, 8], [30, 31, 32, 33, 34]]
        sp = SamplingParams(max_new_tokens=10, greedy=True)

        async def greedy(eng):
            return await asyncio.gather(*(eng.generate(p, sp) for p in prompts))

        before = asyncio.run(greedy(trainer.engine))
        trainer.run()
        after = asyncio.run(greedy(trainer.engine))
        from memrl.models.resolve import load_model

        model = load_model("tiny32", "float32", "cpu")
        model.load_state_dict(merged_state_dict(trainer.policy))
        expected = asyncio.run(greedy(HFEngine(model)))
        assert [r.token_ids for r in after] == [r.token_ids for r in expected]
        for got, want in zip(after, expected):
            assert max(abs(a - b) for a, b in zip(got.logprobs, want.logprobs)) < 1e-4
        assert [r.logprobs for r in after] != [r.logprobs for r in before]
    finally:
        asyncio.run(trainer.engine.close())
