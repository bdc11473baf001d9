"""``memrl train`` with SmolLM2: three MemAgent GRPO steps, LoRA and full fine-tuning.

Reports the engine-vs-trainer log-prob mismatch per response token (``logprob_mismatch``: mean absolute
difference between the HF engine's sampling log-probs and the trainer's recomputation) and checks the KL
to the reference policy is ~0 at step 1, when the policy still is the reference, and grows once it has
been updated (a graded stand-in reward, ``tests.real.rewards``, gives the groups non-zero advantages).
"""

from __future__ import annotations

import json

import pytest

from tests.real.helpers import memrl, report

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hqa10(tmp_path_factory, hotpot_file):
    from memrl.data import plan_synthesis

    out = tmp_path_factory.mktemp("hqa10")
    plan_synthesis(hotpot_file, out, [10], max_samples=3).run()
    return out / "eval_10.json"


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_three_grpo_steps_with_matching_logprobs_and_zero_kl_at_step_one(smol, hqa10, tmp_path, lora):
    run = tmp_path / "run"
    _, wall = memrl("train", f"model.path={smol}", f"data.train_file={hqa10}", "workflow.name=memagent",
                    "workflow.chunk_tokens=384", "workflow.max_chunks=1", "workflow.memory_tokens=16",
                    "workflow.final_tokens=16", "workflow.reward=tests.real.rewards:distinct_words", "algorithm.n=2",
                    "algorithm.kl_coef=0.001", "trainer.prompts_per_step=1", "trainer.total_steps=3",
                    f"trainer.lr={1e-4 if lora else 1e-5}", "trainer.save_every=3",
                    f"trainer.output_dir={run}", f"lora.enabled={str(lora).lower()}", "lora.r=8")
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [s for s in steps if "logprob_mismatch" in s]
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert abs(steps[0]["kl"]) < 1e-6  # the policy is the reference before its first update ...
    assert steps[0]["grad_norm"] > 0 and steps[-1]["kl"] > steps[0]["kl"]  # ... and not after it
    mismatch = [s["logprob_mismatch"] for s in steps]
    assert max(mismatch) < 1e-3  # float32 engine and trainer agree per token (measured ~3e-6)
    report(f"train memagent GRPO, {'LoRA r=8' if lora else 'full'} (3 steps x 2 episodes)", **{
        "logprob mismatch per token (steps 1-3)": [f"{m:.1e}" for m in mismatch],
        "kl (steps 1-3)": [f"{s['kl']:.1e}" for s in steps],
        "reward": [round(s.get("reward", float("nan")), 2) for s in steps], "s/step": round(wall / 3, 1)})
