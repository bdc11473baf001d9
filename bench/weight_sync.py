"""Seconds and GB/s of one weight sync into the in-process vLLM engine, per path, beside a plain memcpy.

Usage:
    .venv-vllm/bin/python bench/weight_sync.py                          # 5M, 135M and 0.5B shapes
    .venv-vllm/bin/python bench/weight_sync.py --shapes smollm2-135m --repeats 5

For each named shape (``bench/real_shapes.py``: published configs, random weights, built
locally) it starts vLLM (its CPU build here, CUDA elsewhere), then times ``update_weights``
of one set of new random weights over each path (``shm``: buckets through ``/dev/shm``;
``bytes``: safetensors bytes through vLLM's RPC; ``--backend ipc|nccl`` on CUDA adds that
path), after one untimed warm-up sync per path (it maps the shared files). ``memcpy`` is one
plain copy of the same bytes between two warm buffers of this process (on the GPU under
CUDA), timed right before every sync of the run: the physical bound (median shown; ``x
memcpy`` divides by it). ``vllm reload`` is vLLM's own layerwise reload of the whole model
from a file the worker has already mapped (no transport at all): what applying the weights
costs inside the engine whatever the path (its CPU build repacks every linear layer for
oneDNN). After each path's last sync the engine's greedy tokens are compared with those
after a bytes sync of the same weights.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from real_shapes import SHAPES, build_shaped_model, random_state  # noqa: E402

from memrl.engines.base import SamplingParams  # noqa: E402
from memrl.engines.vllm_sync import with_aliases  # noqa: E402


def payload_bytes(state: dict[str, Any]) -> int:
    """Bytes a sync moves: each tensor once (a tied alias shares its original's bytes)."""
    items, aliases = with_aliases(state)
    return sum(t.numel() * t.element_size() for i, (_, t) in enumerate(items) if i not in aliases)


class Memcpy:
    """One plain copy of the payload's bytes between two warm buffers on ``device``: the physical bound."""

    def __init__(self, nbytes: int, device: str = "cpu") -> None:
        self.device = torch.device(device)
        self.src = torch.ones(nbytes, dtype=torch.uint8, device=device)
        self.dst = torch.zeros(nbytes, dtype=torch.uint8, device=device)  # pages touched: the copy, not faults

    def seconds(self) -> float:
        t0 = time.perf_counter()
        self.dst.copy_(self.src)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - t0


def reload_floor(engine: Any, state: dict[str, Any], repeats: int, memcpy: Memcpy) -> tuple[float, float]:
    """Median seconds of vLLM's reload of ``state`` from one bucket already in a mapped file (no transport),
    and of a memcpy timed right before each."""
    from memrl.engines.vllm_sync import ShmSlots, plan_buckets, shm_root, write_bucket

    items, aliases = with_aliases(state)
    (bucket,) = plan_buckets([(n, t.shape, t.dtype) for n, t in items], 2**62, aliases=aliases)
    slots = ShmSlots(shm_root() or "/tmp", count=1)
    path, buf, _ = slots.get(0, bucket.nbytes)
    write_bucket(buf, bucket, [t for _, t in items])
    rpc = engine.engine.collective_rpc

    async def reload() -> None:
        await rpc("memrl_begin_update")
        try:
            await rpc("memrl_load_bucket", args=(str(path), buf.numel(), bucket.names, bucket.dtypes, bucket.shapes,
                                                 bucket.offsets))
        finally:
            await rpc("memrl_finish_update")

    times, bound = [], []
    try:
        for _ in range(repeats + 1):
            bound.append(memcpy.seconds())
            t0 = time.perf_counter()
            asyncio.run(engine._call(reload()))
            times.append(time.perf_counter() - t0)
    finally:
        asyncio.run(engine._call(rpc("memrl_release_shm", args=(str(path),))))
        slots.close()
    return statistics.median(times[1:]), statistics.median(bound[1:])


def greedy(engine: Any) -> list[int]:
    sp = SamplingParams(max_new_tokens=8, greedy=True)
    return asyncio.run(engine.generate([5, 6, 7, 8, 9, 10], sp)).token_ids


def time_path(engine: Any, path: str, state: dict[str, Any], repeats: int, memcpy: Memcpy) \
        -> tuple[float, float]:
    """Median seconds of ``update_weights`` over ``path`` (one warm-up sync first, untimed), and of a memcpy
    timed right before each sync (the same load on the machine)."""
    engine.sync_path = path
    times, bound = [], []
    for _ in range(repeats + 1):
        bound.append(memcpy.seconds())
        t0 = time.perf_counter()
        asyncio.run(engine.update_weights(state))
        times.append(time.perf_counter() - t0)
        if engine.last_sync_path != path:
            raise RuntimeError(f"the engine synced over {engine.last_sync_path}, not {path}")
    return statistics.median(times[1:]), statistics.median(bound[1:])


def bench_shape(shape: str, dtype: str, paths: list[str], repeats: int, root: Path, backend: str | None = None,
                trainer_gpu: int = 0, bucket_mb: int = 256) -> list[dict[str, Any]]:
    """Rows for one shape. ``backend``: vLLM's weight-transfer engine to start (``ipc``/``nccl``, CUDA) so that
    path can be timed beside shm and bytes; the weights are sent from ``cuda:trainer_gpu`` on CUDA."""
    from memrl.engines.vllm import VLLMEngine

    folder = build_shaped_model(shape, root / f"{shape}-{dtype}", dtype)
    cuda = torch.cuda.is_available()
    kw: dict[str, Any] = {"max_model_len": 1024, "enforce_eager": True}
    if cuda:
        kw["gpu_memory_utilization"] = 0.3
    else:
        kw.update(kv_cache_memory_bytes=2**28, enable_chunked_prefill=False, max_num_batched_tokens=2048)
    device = f"cuda:{trainer_gpu}" if cuda else "cpu"
    engine = VLLMEngine.from_pretrained(str(folder), dtype=dtype, sync_path=backend or "shm",
                                        trainer_gpu=trainer_gpu if cuda else None, **kw)
    engine.bucket_bytes = bucket_mb * 2**20
    try:
        state = {k: v.to(device) for k, v in random_state(shape, dtype, seed=1).items()}
        state["lm_head.weight"] = state["model.embed_tokens.weight"]  # tied, as the checkpoint is
        nbytes = payload_bytes(state)
        memcpy = Memcpy(nbytes, device)
        rows: list[dict[str, Any]] = []
        bounds: list[float] = []
        reference: list[int] = []
        for path in ["bytes", *[p for p in paths if p != "bytes"]]:  # bytes first: the tokens to compare with
            if path in paths:
                s, bound = time_path(engine, path, state, repeats, memcpy)
                bounds.append(bound)
            else:
                engine.sync_path = "bytes"
                asyncio.run(engine.update_weights(state))
            tokens = greedy(engine)
            reference = tokens if path == "bytes" else reference
            if path in paths:
                rows.append({"shape": shape, "path": path, "s": s, "agree": "yes" if tokens == reference else "NO"})
        s, bound = reload_floor(engine, state, repeats, memcpy)
        bounds.append(bound)
        rows.insert(0, {"shape": shape, "path": "vllm reload", "s": s, "agree": ""})
        rows.insert(0, {"shape": shape, "path": "memcpy", "s": statistics.median(bounds), "agree": ""})
        for r in rows:  # every row against the median memcpy of the run (timed beside each sync)
            r.update(mb=nbytes / 2**20, gbps=nbytes / r["s"] / 1e9, x=r["s"] / rows[0]["s"])
        return rows
    finally:
        engine.shutdown()


def table(rows: list[dict[str, Any]], device: str) -> str:
    lines = [f"weight sync into the in-process vLLM engine ({device}; median of timed syncs after one warm-up)",
             "", "| shape | path | MB | s/sync | GB/s | x memcpy | tokens = bytes path |",
             "|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['path']} | {r['mb']:.0f} | {r['s']:.4f} | {r['gbps']:.2f} | "
                     f"{r['x']:.2f} | {r['agree']} |")
    return "\n".join(lines)


def device_name() -> str:
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    import platform

    return f"CPU {platform.processor() or platform.machine()}, {os.cpu_count()} cores, vLLM CPU build"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="tiny-5m,smollm2-135m,qwen2.5-0.5b",
                    help=f"comma-separated, of: {', '.join(SHAPES)}")
    ap.add_argument("--paths", default="shm,bytes", help="comma-separated sync paths (shm, bytes; ipc/nccl on CUDA)")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--backend", choices=["ipc", "nccl"], help="CUDA: start vLLM's weight-transfer engine of this "
                    "backend and time that path too (nccl: weights sent from cuda:1, the engine on cuda:0)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bucket-mb", type=int, default=256, help="engine.vllm.bucket_mb")
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "memrl" / "bench-shapes"),
                    help="where the random-weight model folders are kept between runs")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    rows: list[dict[str, Any]] = []
    for shape in args.shapes.split(","):
        if shape not in SHAPES:
            sys.exit(f"unknown shape {shape!r}: one of {', '.join(SHAPES)}")
        paths = args.paths.split(",") + ([args.backend] if args.backend else [])
        rows += bench_shape(shape, args.dtype, paths, args.repeats, Path(args.cache), args.backend,
                            trainer_gpu=1 if args.backend == "nccl" else 0, bucket_mb=args.bucket_mb)
        print(table(rows[-len(paths) - 2:], device_name()) + "\n", flush=True)
    if len(args.shapes.split(",")) > 1:
        print(table(rows, device_name()))


if __name__ == "__main__":
    main()
