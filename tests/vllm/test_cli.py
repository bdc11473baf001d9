"""memrl's CLI on vLLM itself: eval transcripts equal the HF engine's, training syncs every update."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="vLLM not installed: `make test-vllm` runs these with vLLM's CPU build")

import yaml  # noqa: E402

from memrl.train.engine_sync import SYNC_PATH_CODES  # noqa: E402
from tests.vllm.conftest import VLLM_OVERRIDES  # noqa: E402
from tests.vllm.helpers import MEMAGENT, memrl, qa_file, read_metrics, train_config  # noqa: E402


def test_eval_transcripts_equal_the_hf_engine(tmp_path):
    data = tmp_path / "data"
    qa_file(data / "eval_3.jsonl", 4)
    outs = {}
    for kind in ("hf", "vllm"):
        outs[kind] = tmp_path / kind
        r = memrl("eval", "--model", "tiny32", "--engine", kind, "--data", data, "--docs", "3", "--out", outs[kind],
                  "model.dtype=float32", *VLLM_OVERRIDES[3:], *MEMAGENT)
        assert r.returncode == 0, r.stderr[-3000:]
    names = sorted(p.relative_to(outs["hf"]) for p in (outs["hf"] / "transcripts").rglob("*.txt"))
    assert len(names) == 4
    for name in names:
        assert (outs["vllm"] / name).read_text() == (outs["hf"] / name).read_text(), name


def test_train_cli_three_steps_syncs_weights(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(train_config(tmp_path, 3)))
    r = memrl("train", path)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [m for m in read_metrics(tmp_path / "run") if "reward" in m]
    assert [m["step"] for m in rows] == [1, 2, 3]
    for m in rows:
        assert m["logprob_mismatch"] < 1e-3, m  # float32: the engine samples from the policy's own weights
        assert m["sync_mb"] > 0
        assert m["sync/path"] == SYNC_PATH_CODES["shm"] and m["sync/gb_per_s"] > 0  # the CPU build's default
    from safetensors.torch import load_file

    steps = sorted((tmp_path / "run" / "checkpoints").glob("step_*"))
    assert len(steps) == 3
    weights = [load_file(next((s / "model").glob("*.safetensors"))) for s in steps]
    for a, b in zip(weights, weights[1:]):
        assert any(not a[k].equal(b[k]) for k in a)
