"""``memrl eval`` with the tiny model on files synthesized from the real HotpotQA sample."""

import json
import math
import subprocess
import sys

import pytest

from memrl.data import plan_synthesis, read_samples
from memrl.models.resolve import load_tokenizer
from memrl.workflows.common import encode_text

CHUNK = 1500  # tokens per chunk: both sizes below take several conversations
ARGS = [f"workflow.chunk_tokens={CHUNK}", "workflow.memory_tokens=3", "workflow.final_tokens=3"]


def memrl(*args):
    return subprocess.run([sys.executable, "-m", "memrl.cli.main", *map(str, args)],
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def eval_data(tmp_path_factory, hotpot_file):
    d = tmp_path_factory.mktemp("evaldata")
    plan_synthesis(hotpot_file, d, [5, 15], max_samples=2).run()
    return d


def test_eval_writes_outputs_and_resumes(tmp_path, eval_data):
    out = tmp_path / "ev"
    cmd = ["eval", "--model", "tiny", "--workflow", "memagent", "--data", eval_data, "--docs", "5,15",
           "--out", out, *ARGS]
    r = memrl(*cmd)
    assert r.returncode == 0, r.stderr
    assert "| 5 |" in r.stdout and "| 15 |" in r.stdout
    results = json.loads((out / "results.json").read_text())
    assert set(results["by_docs"]) == {"5", "15"}
    assert (out / "results.md").read_text().startswith("**memagent**")
    assert (out / "accuracy.png").read_bytes()[:4] == b"\x89PNG"

    tok = load_tokenizer("tiny")
    for n in (5, 15):
        for s in read_samples(eval_data / f"eval_{n}.json"):
            ep = json.loads((out / "episodes" / str(n) / f"{s.index}.json").read_text())
            expected = math.ceil(len(encode_text(tok, s.context)) / CHUNK) + 1
            assert len(ep["conversations"]) == expected == ep["metrics"]["num_conversations"]
            transcript = (out / "transcripts" / str(n) / f"{s.index}.txt").read_text()
            assert s.question in transcript and f"conversation {expected}/{expected}" in transcript

    # interrupted run: one episode missing -> only it is recomputed (a 5-docs one, not a 15-docs one)
    victim = out / "episodes" / "5" / "1.json"
    kept = out / "episodes" / "15" / "0.json"
    kept_before = kept.read_text()
    victim.unlink()
    r = memrl(*cmd)
    assert r.returncode == 0, r.stderr
    assert "resuming: 3 of 4 episodes already done" in r.stderr
    assert victim.is_file() and kept.read_text() == kept_before

    # a different config must not mix into the same results
    r = memrl(*cmd[:-3], "workflow.chunk_tokens=999", *ARGS[1:])
    assert r.returncode == 2 and "workflow.chunk_tokens" in r.stderr and "--restart" in r.stderr


def test_eval_missing_file_is_a_clear_error(tmp_path, eval_data):
    r = memrl("eval", "--model", "tiny", "--data", eval_data, "--docs", "77", "--out", tmp_path / "o")
    assert r.returncode == 2
    assert "no eval_77.json" in r.stderr and "eval_5.json" in r.stderr
