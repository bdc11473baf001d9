"""Generation throughput of memrl's engines on the same model and prompts: HF vs vLLM in-process vs a vLLM server.

Usage:
    python bench/engine_throughput.py                       # HF engine only, tiny32
    .venv-vllm/bin/python bench/engine_throughput.py --engines hf,vllm,server
    .venv-vllm/bin/python bench/engine_throughput.py --model ~/.cache/memrl/smollm2-135m-instruct \
        --engines hf,vllm,server                            # after `make smol`

"Concurrency 1" sends requests one after another (no batching possible); at 8/32/128 requests are
in flight together and each engine batches them its own way (HF: padded batches; vLLM: continuous
batching). ``server`` is ``vllm.entrypoints.openai.api_server`` on 127.0.0.1, driven through memrl's
OpenAI-compatible client engine. Prints generated tokens per second per engine and concurrency.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from typing import Any

import torch

from memrl.engines.base import SamplingParams
from memrl.models.resolve import resolve_model_path

CONCURRENCY = (1, 8, 32, 128)


async def measure(engine: Any, concurrency: int, requests: int, prompt_tokens: int, new_tokens: int,
                  vocab: int) -> float:
    params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, seed=0)
    prompts = [[(7 * i + j) % (vocab - 20) + 10 for j in range(prompt_tokens)] for i in range(requests)]
    sem = asyncio.Semaphore(concurrency)

    async def one(p: list[int]) -> int:
        async with sem:
            return len((await engine.generate(p, params)).token_ids)

    t0 = time.perf_counter()
    total = sum(await asyncio.gather(*(one(p) for p in prompts)))
    return total / (time.perf_counter() - t0)


def start_server(path: str, dtype: str, max_len: int) -> tuple[subprocess.Popen, str]:
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    proc = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", path,
                             "--host", "127.0.0.1", "--port", str(port), "--dtype", dtype, "--enforce-eager",
                             "--max-model-len", str(max_len), "--served-model-name", "bench",
                             # as memrl's in-process default on a CPU: vLLM's CPU sampler fails on seeded
                             # requests whose prompts are split across scheduler steps
                             "--no-enable-chunked-prefill", "--max-num-batched-tokens", str(max(max_len, 2048))],
                            stdout=subprocess.DEVNULL, stderr=open(os.environ.get("BENCH_SERVER_LOG", os.devnull), "w"), env=env)
    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError("the vLLM server exited during start-up")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc, f"http://127.0.0.1:{port}/v1"
        except httpx.HTTPError:
            pass
        time.sleep(1)
    proc.kill()
    raise RuntimeError("the vLLM server did not start in 10 minutes")


def build(kind: str, path: str, dtype: str, max_len: int) -> tuple[Any, Any]:
    """(engine, cleanup) for one engine kind."""
    if kind == "hf":
        from memrl.engines.hf import HFEngine
        from memrl.models.resolve import load_model

        return HFEngine(load_model(path, dtype=dtype), max_batch_size=128), None
    if kind == "vllm":
        from memrl.config import load_config
        from memrl.engines.vllm import VLLMEngine

        cfg = load_config(None, [f"model.path={path}", f"model.dtype={dtype}", "engine.kind=vllm",
                                 f"engine.vllm.max_model_len={max_len}", "engine.vllm.kv_cache_memory=2"])
        eng = VLLMEngine.from_config(cfg)
        return eng, eng.shutdown
    if kind == "server":
        from memrl.engines.openai import OpenAIEngine

        proc, url = start_server(path, dtype, max_len)
        return OpenAIEngine(url, model="bench", api_key_env=None, concurrency=max(CONCURRENCY)), proc.terminate
    raise SystemExit(f"unknown engine {kind!r}: use hf, vllm or server")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny32", help="model folder or alias (vLLM on CPU needs head size >= 32)")
    ap.add_argument("--engines", default="hf", help="comma-separated: hf, vllm, server")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--requests", type=int, default=128, help="requests per measurement (concurrency > 1)")
    args = ap.parse_args()
    path = resolve_model_path(args.model)
    from transformers import AutoConfig

    vocab = AutoConfig.from_pretrained(path).vocab_size
    max_len = args.prompt_tokens + args.new_tokens + 64
    print(f"model {args.model}, {args.dtype}, {torch.get_num_threads()} torch threads, {os.cpu_count()} cores; "
          f"prompt {args.prompt_tokens} + {args.new_tokens} new tokens")
    print(f"{'engine':>8} " + " ".join(f"{'c=' + str(c):>9}" for c in CONCURRENCY) + "   (generated tokens/s)")
    for kind in args.engines.split(","):
        engine, cleanup = build(kind.strip(), path, args.dtype, max_len)
        try:
            asyncio.run(measure(engine, 4, 8, args.prompt_tokens, 8, vocab))  # warm-up
            cells = []
            for c in CONCURRENCY:
                n = args.requests if c > 1 else max(8, args.requests // 16)
                cells.append(asyncio.run(measure(engine, c, max(n, c), args.prompt_tokens, args.new_tokens, vocab)))
            print(f"{kind:>8} " + " ".join(f"{v:>9.0f}" for v in cells), flush=True)
        finally:
            if cleanup is not None:
                cleanup()


if __name__ == "__main__":
    main()
