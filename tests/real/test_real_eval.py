"""``memrl eval`` with SmolLM2: MemAgent and ReMemR1 under ``--protocol memagent`` at 50 documents, RULER niah at 4K."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.real.helpers import eval_numbers, memrl, report

pytestmark = pytest.mark.slow

# Two questions, the context centre-cut to two 768-token chunks: three conversations per MemAgent episode.
# float32: on CPUs without bf16 kernels a bf16 prefill is slower (measured 14 s vs 8 s for 1,200 tokens).
SMALL = ["--max-samples", "2", "--temperature", "0", "workflow.chunk_tokens=768", "workflow.max_chunks=2",
         "workflow.memory_tokens=48", "workflow.final_tokens=24"]


@pytest.fixture(scope="module")
def hqa50(tmp_path_factory, hotpot_file):
    from memrl.data import plan_synthesis

    out = tmp_path_factory.mktemp("hqa")
    plan_synthesis(hotpot_file, out, [50], max_samples=2).run()
    return out


@pytest.mark.parametrize("workflow", ["memagent", "rememr1"])
def test_eval_under_protocol_memagent_at_50_documents(smol, hqa50, tmp_path, workflow):
    out = tmp_path / "ev"
    _, wall = memrl("eval", "--model", smol, "--workflow", workflow, "--data", hqa50, "--docs", "50", "--out", out,
                    "--protocol", "memagent", *SMALL)
    res = json.loads((out / "results.json").read_text())
    row = res["by_docs"]["50"]
    assert res["protocol"] == "memagent" and row["finished"] == 2 and row["failed"] == 0
    options = yaml.safe_load((out / "eval_config.yaml").read_text())["workflow"]["options"]
    assert options["slot_fill"] == "text"  # both papers' clients send text: the server tokenizes each prompt whole
    transcript = sorted((out / "transcripts" / "50").glob("*.txt"))[0].read_text()
    assert "<|im_start|>user" in transcript and "<|im_start|>assistant" in transcript  # SmolLM2's ChatML
    episode = json.loads(sorted((out / "episodes" / "50").glob("*.json"))[0].read_text())
    assert episode["metrics"]["num_conversations"] == 3.0  # two chunks + the final turn
    assert all(c["response_tokens"] >= 1 for c in episode["conversations"])
    report(f"eval {workflow} --protocol memagent, 50 docs (2 x 768-token chunks)", **eval_numbers(out, "50", wall))


def test_eval_ruler_niah_at_4k_tokens(smol, tmp_path):
    data, out = tmp_path / "ruler", tmp_path / "ev"
    memrl("data", "ruler", "--out", data, "--tokenizer", smol, "--lengths", "4k", "--tasks", "niah_single_1",
          "--samples", "2")
    _, wall = memrl("eval", "--suite", "ruler", "--model", smol, "--data", data, "--docs", "4096", "--out", out,
                    "--temperature", "0", "workflow.chunk_tokens=2048",
                    "workflow.memory_tokens=48", "workflow.final_tokens=24")
    row = json.loads((out / "results.json").read_text())["by_task"]["niah_single_1"]["4096"]
    assert row["finished"] == 2 and row["failed"] == 0 and row["metric"] == "string_match_all"
    episodes = [json.loads(p.read_text()) for p in (out / "episodes").rglob("*.json")]
    assert len(episodes) == 2 and all(e["metrics"]["num_conversations"] >= 3 for e in episodes)
    tokens = sum(e["metrics"]["response_tokens"] for e in episodes)
    report("eval --suite ruler niah_single_1 at 4K tokens (2 x 2,048-token chunks, MemAgent's prompts)", **{
        "RULER score %": row["score"], "episodes": len(episodes),
        "s/episode": round(sum(e["seconds"] for e in episodes) / len(episodes), 1),
        "tokens/s": round(tokens / wall, 1)})
