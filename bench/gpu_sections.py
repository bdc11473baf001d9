"""The measurements of ``bench/gpu_check.py``, one function per section, each returning table rows.

A row is ``{"check": ..., "setting": ..., "result": ...}``. Every section builds what it needs
locally (random weights of a named published shape, memrl's local tokenizer, the needle task
of ``memrl demo``) and runs in a process of its own, so one section's GPU memory never
counts in the next one's peak.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from real_shapes import build_shaped_model, param_count  # noqa: E402

Row = dict[str, str]
CONCURRENCY = (1, 8, 64)


def error_line(output: str) -> str:
    """The error line of a failed child: its output's last non-empty line, cut to 200 characters."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    return (lines or ["no output"])[-1][:200]


def failure_tail(stderr: str) -> str:
    """:func:`error_line`, after printing the last 25 lines of that stderr to ours so the whole error can be
    read."""
    print("\n".join(stderr.strip().splitlines()[-25:]), file=sys.stderr, flush=True)
    return error_line(stderr)


def has_vllm() -> bool:
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True


def model_dir(shape: str, dtype: str) -> Path:
    root = Path(os.environ.get("MEMRL_BENCH_CACHE", Path.home() / ".cache" / "memrl" / "bench-shapes"))
    return build_shaped_model(shape, root / f"{shape}-{dtype}", dtype)


def copy_bandwidth(device: str, nbytes: int = 2**30) -> float:
    """Bytes/s the device moves in a large copy (read + write counted): the bound decoding is held to."""
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for _ in range(5):
        dst.copy_(src)
    sync()
    return 2 * 5 * nbytes / (time.perf_counter() - t0)


def decode_bound(concurrency: int, weight_bytes: int, bandwidth: float) -> float:
    """Tokens/s if each decoding step only streamed the weights once for all ``concurrency`` sequences."""
    return concurrency * bandwidth / weight_bytes


async def _tokens_per_s(engine: Any, concurrency: int, requests: int, prompt: int, new: int) -> float:
    from memrl.engines.base import SamplingParams

    params = SamplingParams(max_new_tokens=new, temperature=1.0, seed=0, stop_token_ids=())
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> int:
        async with sem:
            ids = [(7 * i + j) % 400 + 10 for j in range(prompt)]
            return len((await engine.generate(ids, params)).token_ids)

    t0 = time.perf_counter()
    total = sum(await asyncio.gather(*(one(i) for i in range(requests))))
    return total / (time.perf_counter() - t0)


def generation(shape: str, device: str, dtype: str, prompt: int = 512, new: int = 128, smoke: bool = False) \
        -> list[Row]:
    """HF and (if installed) vLLM tokens/s at 1/8/64 concurrent requests, and % of the bandwidth bound
    (``smoke``: 64-token prompts, 16 new tokens)."""
    if smoke:
        prompt, new = 64, 16
    from memrl.engines.hf import HFEngine
    from memrl.engines.hf_static import resolve_decode
    from memrl.models.resolve import load_model

    path = str(model_dir(shape, dtype))
    weight_bytes = param_count(shape) * torch.empty((), dtype=getattr(torch, dtype)).element_size()
    bandwidth = copy_bandwidth(device, 2**30 if device.startswith("cuda") else 2**26)
    rows = [{"check": "copy bandwidth", "setting": device, "result": f"{bandwidth / 1e9:.0f} GB/s"}]
    hf = HFEngine(load_model(path, dtype=dtype, device=device), max_batch_size=max(CONCURRENCY))
    path_name = "static" if resolve_decode(hf.decode, hf.model, hf.device) else "eager"
    rows += _throughput_rows(f"HF {path_name}", hf, shape, dtype, weight_bytes, bandwidth, prompt, new)
    del hf
    gc.collect()  # the engine's worker tasks keep it in a reference cycle: its cache pools go only now
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    if not has_vllm():
        return [*rows, {"check": "generation tokens/s", "setting": "vLLM", "result": "not installed"}]
    from memrl.engines.vllm import VLLMEngine

    kw: dict[str, Any] = {"max_model_len": prompt + new + 64}
    if device.startswith("cuda"):
        kw.update(gpu_memory_utilization=0.5, enforce_eager=False)
    else:
        kw.update(enforce_eager=True, kv_cache_memory_bytes=2**28, enable_chunked_prefill=False,
                  max_num_batched_tokens=2048)
    engine = VLLMEngine.from_pretrained(path, dtype=dtype, **kw)
    try:
        rows += _throughput_rows("vLLM", engine, shape, dtype, weight_bytes, bandwidth, prompt, new)
    finally:
        engine.shutdown()
    return rows


def _throughput_rows(name: str, engine: Any, shape: str, dtype: str, weight_bytes: int, bandwidth: float,
                     prompt: int, new: int) -> list[Row]:
    asyncio.run(_tokens_per_s(engine, 4, 4, prompt, 8))  # warm-up
    rows = []
    for c in CONCURRENCY:
        rate = asyncio.run(_tokens_per_s(engine, c, max(2 * c, 4), prompt, new))
        bound = decode_bound(c, weight_bytes, bandwidth)
        rows.append({"check": "generation tokens/s", "setting": f"{name}, {c} concurrent, {shape} {dtype}, "
                     f"prompt {prompt} + {new} new",
                     "result": f"{rate:.0f} tok/s = {100 * rate / bound:.1f}% of the bound {bound:.0f}"})
    return rows


def curve(setting: str, budget_s: float, results: str | None = None) -> list[Row]:
    """``bench/real_curve.py --setting <setting>`` in this process: its rows (also written to ``results``'s
    table after each run, so a run cut short keeps the finished ones)."""
    import real_curve

    return real_curve.run_setting(setting, budget_s=budget_s, results=Path(results) if results else None)


def weight_sync(shape: str, device: str, dtype: str, smoke: bool = False) -> list[Row]:
    """Seconds and GB/s of a sync into vLLM per path (``bench/weight_sync.py``), beside a memcpy on the device."""
    if not has_vllm():
        return [{"check": "weight sync", "setting": "vLLM", "result": "not installed"}]
    from weight_sync import bench_shape

    cuda = device.startswith("cuda")
    root = Path(os.environ.get("MEMRL_BENCH_CACHE", Path.home() / ".cache" / "memrl" / "bench-shapes"))
    runs = [("ipc", ["ipc", "shm", "bytes"], 0)] if cuda else [(None, ["shm", "bytes"], 0)]
    if cuda and torch.cuda.device_count() > 1:
        runs.append(("nccl", ["nccl"], 1))
    rows: list[Row] = []
    for backend, paths, trainer_gpu in runs:
        for r in bench_shape(shape, dtype, paths, 3, root, backend, trainer_gpu=trainer_gpu):
            if backend == "nccl" and r["path"] in ("memcpy", "vllm reload"):
                continue
            note = f" = {r['x']:.1f}x memcpy" if r["path"] != "memcpy" else ""
            agree = {"yes": ", same tokens as bytes", "NO": ", tokens DIFFER from bytes"}.get(r["agree"], "")
            rows.append({"check": "weight sync", "setting": f"{r['path']}, {shape} {dtype} ({r['mb']:.0f} MB)",
                         "result": f"{r['s']:.3f} s, {r['gbps']:.2f} GB/s{note}{agree}"})
    return rows


def grpo_config(tmp: Path, path: str, device: str, dtype: str, lora: bool, engine: str,
                smoke: bool = False) -> dict[str, Any]:
    """One MemAgent GRPO step on the needle task: 4 prompts x 8 episodes, two 1K-token chunks each
    (``smoke``: 2 x 2 episodes of two 128-token chunks, to test the plumbing on a CPU)."""
    from memrl.data import write_samples
    from memrl_demo.needle import make_split

    write_samples(make_split(1, 16, (20, 40)), tmp / "train.jsonl", fmt="jsonl")
    chunk, memory, n, prompts = (128, 16, 2, 2) if smoke else (1024, 128, 8, 4)
    cfg: dict[str, Any] = {
        "model": {"path": path, "dtype": dtype},
        "data": {"train_file": str(tmp / "train.jsonl")},
        "workflow": {"name": "memagent", "chunk_tokens": chunk, "memory_tokens": memory, "final_tokens": 16,
                     "max_chunks": 2, "reward": "em"},
        "algorithm": {"n": n, "entropy_coef": 0.01, "kl_coef": 0.001},
        "lora": {"enabled": lora, "r": 16},
        "trainer": {"lr": 1e-5, "total_steps": 2, "prompts_per_step": prompts, "save_every": 1000,
                    "output_dir": str(tmp / "run"), "gradient_checkpointing": True, "micro_batch_tokens": 16384},
        "engine": {"kind": engine, "device": device, "max_batch_size": 64},
    }
    if engine == "vllm":
        cfg["engine"]["gpu_memory_utilization"] = 0.3
        cfg["engine"]["vllm"] = {"max_model_len": 4096}
        if device == "cpu":  # vLLM's CPU build would reserve most of the host memory for its KV cache
            cfg["engine"]["vllm"]["kv_cache_memory"] = 0.25
        cfg["cluster"] = {"placement": "colocate"}
    return cfg


def grpo_step(shape: str, device: str, dtype: str, lora: bool, engine: str = "hf", gpus: int = 1,
              smoke: bool = False) -> list[Row]:
    """The second of two GRPO steps (``memrl train``; the first warms up): time split, peak memory, mismatch."""
    import yaml

    tmp = Path(tempfile.mkdtemp(prefix="memrl-gpu-check-"))
    cfg = grpo_config(tmp, str(model_dir(shape, dtype)), device, dtype, lora, engine, smoke)
    cli = ["-m", "memrl.cli.main", "train", str(tmp / "cfg.yaml")]
    if gpus > 1:
        cfg["cluster"] = {"strategy": "fsdp", "backend": "nccl"}
        cfg["engine"].pop("device")
        cli = ["-m", "torch.distributed.run", f"--nproc_per_node={gpus}", *cli]
    (tmp / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([sys.executable, *cli], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    decode = re.search(r"hf decode: (static|eager)", proc.stdout + proc.stderr)
    engine_name = f"{engine} engine" + (f" ({decode.group(1)} decode)" if decode else "")
    mode = f"{'LoRA r=16' if lora else 'full'}, {engine_name}" + (f", FSDP over NCCL x{gpus}" if gpus > 1 else "")
    setting = f"{shape} {dtype}, {mode}"
    if proc.returncode != 0:
        return [{"check": "MemAgent GRPO step", "setting": setting, "result": f"FAILED: {failure_tail(proc.stderr)}"}]
    rows = [json.loads(x) for x in (tmp / "run" / "metrics.jsonl").read_text().splitlines() if x.strip()]
    last = [r for r in rows if "time/update" in r][-1]
    split = " / ".join(f"{last.get(k, float('nan')):.2f}" for k in
                       ("time/rollout", "time/logprob", "time/update", "time/sync"))
    from memrl.train.engine_sync import SYNC_PATH_CODES

    peak = f"{last['gpu_peak_gib']:.1f} GiB" if "gpu_peak_gib" in last else "n/a"
    path = {v: k for k, v in SYNC_PATH_CODES.items()}.get(last.get("sync/path", 0.0))
    synced = f"; sync over {path} at {last.get('sync/gb_per_s', 0):.2f} GB/s" if path else ""
    out = [{"check": "MemAgent GRPO step", "setting": setting,
            "result": f"rollout/logprob/update/sync {split} s; peak GPU memory {peak}; "
                      f"{last.get('tokens_per_s', 0):.0f} generated tok/s{synced}"}]
    if "logprob_mismatch" in last:
        out.append({"check": "log-prob mismatch engine vs trainer", "setting": setting,
                    "result": f"{last['logprob_mismatch']:.4f} (mean absolute difference per token)"})
    return out


def skipped(check: str, why: str) -> list[Row]:
    """A row for a section this machine cannot run."""
    return [{"check": check, "setting": "", "result": why}]


def _timed_train(cfg: dict[str, Any], tmp: Path) -> tuple[list[dict[str, Any]], list[float]]:
    """``memrl train`` on ``cfg``; the metrics rows and the moment each appeared (polled), so the time between
    the first and last step leaves model loading and the unoverlapped first step out."""
    import yaml

    (tmp / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    metrics = Path(cfg["trainer"]["output_dir"]) / "metrics.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "memrl.cli.main", "train", str(tmp / "cfg.yaml")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    seen: list[float] = []
    while proc.poll() is None:
        lines = metrics.read_text().count("\n") if metrics.exists() else 0
        seen += [time.perf_counter()] * (lines - len(seen))
        time.sleep(0.05)
    err = proc.stderr.read() if proc.stderr else ""
    if proc.returncode != 0:
        raise RuntimeError(failure_tail(err))
    rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
    seen += [time.perf_counter()] * (len(rows) - len(seen))
    keep = [i for i, r in enumerate(rows) if "train_tokens" in r]
    return [rows[i] for i in keep], [seen[i] for i in keep]


def async_overlap(shape: str, device: str, dtype: str, steps: int = 5, smoke: bool = False) -> list[Row]:
    """Sync vs async (staleness 1, interrupt) on the GRPO step of ``grpo_step`` with LoRA and the HF engine,
    engine and trainer sharing the device: trained tokens/s over steps 2..N and the time split."""
    steps = 3 if smoke else steps
    rows: list[Row] = []
    rates: dict[str, float] = {}
    for mode in ("sync", "async"):
        tmp = Path(tempfile.mkdtemp(prefix=f"memrl-gpu-{mode}-"))
        cfg = grpo_config(tmp, str(model_dir(shape, dtype)), device, dtype, True, "hf", smoke)
        cfg["trainer"].update(total_steps=steps, mode=mode)
        if mode == "async":
            cfg["trainer"]["async"] = {"max_staleness": 1, "partial_rollouts": "interrupt"}
            cfg["algorithm"]["off_policy"] = "decoupled"
        setting = f"{shape} {dtype}, LoRA r=16, HF engine, {mode}" + (" (η = 1, interrupt)" if mode == "async" else "")
        try:
            got, at = _timed_train(cfg, tmp)
        except RuntimeError as e:
            rows.append({"check": "async vs sync", "setting": setting, "result": f"FAILED: {e}"})
            continue
        span = at[-1] - at[0]
        tokens = sum(r["train_tokens"] for r in got[1:])
        rates[mode] = tokens / max(span, 1e-9)
        split = " / ".join(f"{sum(r.get(k, 0.0) for r in got[1:]) / max(len(got) - 1, 1):.2f}"
                           for k in ("time/rollout", "time/logprob", "time/update", "time/sync"))
        ratio = f" = {rates['async'] / rates['sync']:.2f}x sync" if mode == "async" and "sync" in rates else ""
        rows.append({"check": "async vs sync", "setting": setting,
                     "result": f"{span / max(len(got) - 1, 1):.1f} s/step, {rates[mode]:.0f} trained tok/s{ratio} "
                               f"(steps 2-{len(got)}); rollout/logprob/update/sync {split} s"})
    return rows
