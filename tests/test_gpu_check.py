"""``make gpu-check`` (bench/gpu_check.py): one line without a GPU, the plan with --dry-run, the sections."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import gpu_check  # noqa: E402
import gpu_sections  # noqa: E402


def run(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH / "gpu_check.py"), *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "HF_HUB_OFFLINE": "1"})


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_it_says_so_in_one_line():
    before = sorted((BENCH / "results").glob("gpu-*.md"))
    r = run()
    assert r.returncode == 0
    assert r.stdout.splitlines() == [
        "gpu-check: no CUDA GPU found on this machine (torch.cuda.is_available() is False); nothing measured"]
    assert sorted((BENCH / "results").glob("gpu-*.md")) == before  # no table written


def test_dry_run_prints_the_plan_and_measures_nothing():
    r = run("--dry-run")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("gpu-check plan for ")
    names = [ln.split(":")[0].split(". ", 1)[1] for ln in lines[1:-1]]
    assert names[:2] == ["generation", "sync"]
    assert {"grpo-qwen2.5-0.5b-lora", "grpo-qwen2.5-0.5b-full", "grpo-qwen2.5-1.5b-lora",
            "grpo-qwen2.5-1.5b-full", "fsdp"} <= set(names)
    assert lines[-1].startswith("then one table, printed and written to ") and "/bench/results/gpu-" in lines[-1]


def test_the_plan_follows_the_machine():
    one = {name: spec for name, _, spec in gpu_check.sections(1, vllm=False, smoke=False)}
    assert one["fsdp"]["fn"] == "skipped" and "grpo-qwen2.5-0.5b-lora-vllm" not in one
    assert one["grpo-qwen2.5-1.5b-full"] == {"fn": "grpo_step", "shape": "qwen2.5-1.5b", "lora": False,
                                             "device": "cuda", "dtype": "bfloat16", "smoke": False}
    four = {name: (what, spec) for name, what, spec in gpu_check.sections(4, vllm=True, smoke=False)}
    assert four["fsdp"][1]["gpus"] == 4 and "FSDP over NCCL on 4 GPUs" in four["fsdp"][0]
    assert four["grpo-qwen2.5-0.5b-lora-vllm"][1]["engine"] == "vllm"
    assert one["async-qwen2.5-0.5b"] == {"fn": "async_overlap", "shape": "qwen2.5-0.5b", "device": "cuda",
                                         "dtype": "bfloat16", "smoke": False}
    assert "nccl from a second GPU" in four["sync"][0]
    for fn in {spec["fn"] for _, spec in four.values()}:
        assert callable(getattr(gpu_sections, fn))


def test_decode_bound_is_batch_times_bandwidth_over_weight_bytes():
    # 8 sequences share each step's pass over 1 GB of weights on a 2 TB/s device: 16 000 tokens/s
    assert gpu_sections.decode_bound(8, 10**9, 2e12) == pytest.approx(16_000)
    assert gpu_sections.decode_bound(1, 2 * 10**9, 3.35e12) == pytest.approx(1675)


def test_the_table_is_written_after_every_section(tmp_path, monkeypatch):
    # a run cut short (a device lease ending) keeps the rows of the sections it finished
    plan = [("a", "", {"fn": "skipped", "check": "first", "why": "one"}),
            ("b", "", {"fn": "skipped", "check": "second", "why": "two"})]
    seen: list[str] = []
    out = tmp_path / f"gpu-{gpu_check.datetime.date.today()}.md"

    def fake_run(name, spec, timeout):
        seen.append(out.read_text() if out.exists() else "")
        return [{"check": spec["check"], "setting": "", "result": spec["why"]}]

    monkeypatch.setattr(gpu_check, "sections", lambda *a, **k: plan)
    monkeypatch.setattr(gpu_check, "run_section", fake_run)
    monkeypatch.setattr(gpu_check.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gpu_check, "device_header", lambda smoke: "header")
    monkeypatch.setattr(gpu_sections, "has_vllm", lambda: False)
    monkeypatch.setattr(sys, "argv", ["gpu_check.py", "--results", str(tmp_path)])
    assert gpu_check.main() == 0
    assert seen[0] == "" and "| first |  | one |" in seen[1] and "second" not in seen[1]
    assert "| second |  | two |" in out.read_text()


def test_a_failing_section_becomes_a_row():
    rows = gpu_check.run_section("broken", {"fn": "no_such_section"}, timeout=60)
    assert rows[0]["check"] == "broken" and rows[0]["result"].startswith("FAILED: ")


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_smoke_run_fills_the_table_on_the_cpu(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MEMRL_BENCH_CACHE": str(tmp_path)}
    r = subprocess.run([sys.executable, str(BENCH / "gpu_check.py"), "--smoke", "--only",
                        "generation,grpo-tiny-5m-full"], capture_output=True, text=True, timeout=1200, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    assert sum("generation tokens/s | HF" in ln for ln in rows) == 3
    step = next(ln for ln in rows if ln.startswith("| MemAgent GRPO step"))
    assert "rollout/logprob/update/sync" in step and "FAILED" not in step
    assert any(ln.startswith("| log-prob mismatch engine vs trainer") for ln in rows)
