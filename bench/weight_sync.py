"""Seconds and GB/s of one weight sync into the in-process vLLM engine, per path, beside a plain memcpy.

Usage:
    .venv-vllm/bin/python bench/weight_sync.py                          # 5M, 135M and 0.5B shapes
    .venv-vllm/bin/python bench/weight_sync.py --shapes smollm2-135m --repeats 5

For each named shape (``bench/real_shapes.py``: published configs, random weights, built
locally) it starts vLLM (its CPU build here, CUDA elsewhere) and times ``update_weights`` of
one set of new random weights over each path, after one untimed warm-up sync per path (it maps
the shared files):

* ``shm``: buckets of whole layers through ``/dev/shm``, loaded by vLLM's layerwise reload;
* ``bytes``: safetensors bytes through vLLM's RPC; ``--backend ipc|nccl`` on CUDA adds that path;
* on a CPU a second engine runs in plain layout (``engine.vllm.cpu_layout=plain``): its linear
  weights are not repacked for vLLM's CPU GEMM kernels, and ``shm`` writes the new weights
  straight into the served parameters (row ``shm in place``).

``memcpy`` is one plain copy of the same bytes between two warm buffers of this process (on the
GPU under CUDA), timed right before every sync of the run: the physical bound (median shown;
``x memcpy`` divides by it). ``vllm reload`` is vLLM's own layerwise reload of the whole model
from a file the worker has already mapped (no transport at all): what applying the weights costs
inside a packed engine whatever the path; ``repack only`` (CPU) is the part of it no transport can
avoid, vLLM's repacking of every linear weight for its GEMM kernels, timed in this process. After each
path's last sync the engine's greedy tokens are compared with those after a bytes sync of the
same weights into the same engine. Each engine's generation speed (tokens/s at 1 and 8
requests in flight) is printed too: plain layout trades generation speed for sync speed, and
the last line says how many generated tokens per step the faster sync is worth.
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

IN_PLACE = "shm in place"  # the shm path's row in plain layout


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
        self.times: list[float] = []

    def seconds(self) -> float:
        t0 = time.perf_counter()
        self.dst.copy_(self.src)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.times.append(time.perf_counter() - t0)
        return self.times[-1]


def timed(fn: Any, repeats: int, memcpy: Memcpy) -> float:
    """Median seconds of ``fn()`` over ``repeats`` calls after one untimed warm-up, a memcpy timed right before
    each (the same load on the machine)."""
    times = []
    for _ in range(repeats + 1):
        memcpy.seconds()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def reload_floor(engine: Any, state: dict[str, Any], repeats: int, memcpy: Memcpy) -> float:
    """Median seconds of vLLM's reload of ``state`` from one bucket already in a mapped file (no transport)."""
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

    try:
        return timed(lambda: asyncio.run(engine._call(reload())), repeats, memcpy)
    finally:
        asyncio.run(engine._call(rpc("memrl_release_shm", args=(str(path),))))
        slots.close()


FUSED = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "gate_proj": "gate_up_proj",
         "up_proj": "gate_up_proj"}  # checkpoint linears vLLM serves as one weight


def served_linears(state: dict[str, Any]) -> list[Any]:
    """The linear weights a vLLM Llama/Qwen2 engine serves for ``state`` (q/k/v and gate/up fused), plus the LM head."""
    groups: dict[str, list[Any]] = {}
    for name, t in state.items():
        module, _, _ = name.rpartition(".")
        parent, _, leaf = module.rpartition(".")
        if t.dim() == 2 and name.endswith(".weight") and name != "model.embed_tokens.weight":
            groups.setdefault(f"{parent}.{FUSED.get(leaf, leaf)}", []).append(t)
    return [torch.cat(ts) if len(ts) > 1 else ts[0].contiguous() for ts in groups.values()]


def repack_floor(state: dict[str, Any], repeats: int, memcpy: Memcpy) -> float:
    """Median seconds of vLLM's CPU repacking alone (its ``dispatch_cpu_unquantized_gemm`` on every served linear
    weight, here in this process): the least any sync into a packed engine costs, whatever the transport."""
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    weights = served_linears(state)

    def once() -> None:
        for w in weights:
            layer = torch.nn.Module()
            layer.weight = torch.nn.Parameter(w, requires_grad=False)
            dispatch_cpu_unquantized_gemm(layer, remove_weight=True)

    return timed(once, repeats, memcpy)


def greedy(engine: Any) -> list[int]:
    sp = SamplingParams(max_new_tokens=8, greedy=True)
    return asyncio.run(engine.generate([5, 6, 7, 8, 9, 10], sp)).token_ids


def tokens_per_s(engine: Any, concurrency: int, new_tokens: int = 32, prompt: int = 64) -> float:
    """Generated tokens/s with ``concurrency`` greedy requests in flight (after a short warm-up)."""
    async def run(n: int) -> int:
        sp = SamplingParams(max_new_tokens=n, greedy=True)
        outs = await asyncio.gather(*(engine.generate([(11 * i + j) % 400 + 10 for j in range(prompt)], sp)
                                      for i in range(concurrency)))
        return sum(len(o.token_ids) for o in outs)

    asyncio.run(run(2))
    t0 = time.perf_counter()
    made = asyncio.run(run(new_tokens))
    return made / (time.perf_counter() - t0)


def sync_seconds(engine: Any, path: str, state: dict[str, Any], repeats: int, memcpy: Memcpy) -> float:
    """Median seconds of ``update_weights`` over ``path`` (after one untimed warm-up sync)."""
    engine.sync_path = path

    def once() -> None:
        asyncio.run(engine.update_weights(state))
        if engine.last_sync_path != path:
            raise RuntimeError(f"the engine synced over {engine.last_sync_path}, not {path}")

    return timed(once, repeats, memcpy)


def bench_engine(engine: Any, shape: str, layout: str, paths: list[str], state: dict[str, Any], repeats: int,
                 memcpy: Memcpy, gen: tuple[int, ...]) -> list[dict[str, Any]]:
    """Rows of one started engine: each path's seconds and whether its tokens equal the bytes path's."""
    rows: list[dict[str, Any]] = []
    reference: list[int] = []
    for path in ["bytes", *[p for p in paths if p != "bytes"]]:  # bytes first: the tokens to compare with
        s = None
        if path in paths:
            s = sync_seconds(engine, path, state, repeats, memcpy)
        else:
            engine.sync_path = "bytes"
            asyncio.run(engine.update_weights(state))
        tokens = greedy(engine)
        reference = tokens if path == "bytes" else reference
        if s is not None:
            label = IN_PLACE if path == "shm" and engine.in_place else path
            rows.append({"shape": shape, "layout": layout, "path": label, "s": s,
                         "agree": "yes" if tokens == reference else "NO"})
    if layout == "packed":
        rows.insert(0, {"shape": shape, "layout": layout, "path": "vllm reload", "agree": "",
                        "s": reload_floor(engine, state, repeats, memcpy)})
        if not torch.cuda.is_available():
            rows.insert(0, {"shape": shape, "layout": layout, "path": "repack only", "agree": "",
                            "s": repack_floor(state, repeats, memcpy)})
    rates = {c: tokens_per_s(engine, c) for c in gen}
    for r in rows:
        r["tok_s"] = rates
    return rows


def bench_shape(shape: str, dtype: str, paths: list[str], repeats: int, root: Path, backend: str | None = None,
                trainer_gpu: int = 0, bucket_mb: int = 256, layouts: tuple[str, ...] | None = None,
                gen: tuple[int, ...] = ()) -> list[dict[str, Any]]:
    """Rows for one shape. ``backend``: vLLM's weight-transfer engine to start (``ipc``/``nccl``, CUDA) so that
    path can be timed beside shm and bytes; the weights are sent from ``cuda:trainer_gpu`` on CUDA. ``layouts``:
    ``engine.vllm.cpu_layout`` values to start an engine with (default: both on a CPU, packed on CUDA);
    ``gen``: request counts at which each engine's generation tokens/s is measured."""
    from memrl.engines.vllm import VLLMEngine

    folder = build_shaped_model(shape, root / f"{shape}-{dtype}", dtype)
    cuda = torch.cuda.is_available()
    layouts = layouts or (("packed",) if cuda else ("packed", "plain"))
    kw: dict[str, Any] = {"max_model_len": 1024, "enforce_eager": True}
    if cuda:
        kw["gpu_memory_utilization"] = 0.3
    else:
        kw.update(kv_cache_memory_bytes=2**28, enable_chunked_prefill=False, max_num_batched_tokens=2048)
    device = f"cuda:{trainer_gpu}" if cuda else "cpu"
    state = {k: v.to(device) for k, v in random_state(shape, dtype, seed=1).items()}
    state["lm_head.weight"] = state["model.embed_tokens.weight"]  # tied, as the checkpoint is
    nbytes = payload_bytes(state)
    memcpy = Memcpy(nbytes, device)
    rows: list[dict[str, Any]] = []
    for layout in layouts:
        engine = VLLMEngine.from_pretrained(str(folder), dtype=dtype, sync_path=backend or "shm",
                                            trainer_gpu=trainer_gpu if cuda else None, cpu_layout=layout, **kw)
        engine.bucket_bytes = bucket_mb * 2**20
        try:
            rows += bench_engine(engine, shape, layout, paths if layout == "packed" else ["shm"], state, repeats,
                                 memcpy, gen)
        finally:
            engine.shutdown()
    rows.insert(0, {"shape": shape, "layout": "", "path": "memcpy", "s": statistics.median(memcpy.times),
                    "agree": ""})
    for r in rows:  # every row against the median memcpy of the run (timed beside each sync)
        r.update(mb=nbytes / 2**20, gbps=nbytes / r["s"] / 1e9, x=r["s"] / rows[0]["s"])
    return rows


def table(rows: list[dict[str, Any]], device: str) -> str:
    lines = [f"weight sync into the in-process vLLM engine ({device}; median of timed syncs after one warm-up)",
             "", "| shape | layout | path | MB | s/sync | GB/s | x memcpy | tokens = bytes path |",
             "|---|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['layout']} | {r['path']} | {r['mb']:.0f} | {r['s']:.4f} | "
                     f"{r['gbps']:.2f} | {r['x']:.2f} | {r['agree']} |")
    return "\n".join(lines)


def generation_table(rows: list[dict[str, Any]]) -> str:
    """Each engine's generation tokens/s, and for plain layout the tokens per step below which it wins."""
    engines = {(r["shape"], r["layout"]): r["tok_s"] for r in rows if r.get("tok_s")}
    if not engines:
        return ""
    counts = sorted({c for rates in engines.values() for c in rates})
    lines = ["| shape | layout | " + " | ".join(f"tok/s at {c}" for c in counts) + " |",
             "|---|---|" + "---:|" * len(counts)]
    for (shape, layout), rates in engines.items():
        lines.append(f"| {shape} | {layout} | " + " | ".join(f"{rates[c]:.1f}" for c in counts) + " |")
    sync = {(r["shape"], r["path"]): r["s"] for r in rows}
    for shape in dict.fromkeys(s for s, _ in engines):
        if (shape, "packed") in engines and (shape, "plain") in engines and (shape, IN_PLACE) in sync:
            c = counts[-1]
            saved = sync[(shape, "shm")] - sync[(shape, IN_PLACE)]
            extra = 1 / engines[(shape, "plain")][c] - 1 / engines[(shape, "packed")][c]
            when = "always" if extra <= 0 else f"below {saved / extra:.0f} generated tokens per step"
            lines.append(f"\n{shape}: plain layout saves {saved:.3f} s per sync and costs {max(extra, 0) * 1e3:.2f} "
                         f"ms per generated token at {c} in flight: it shortens a training step {when}.")
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
    ap.add_argument("--layouts", help="comma-separated engine.vllm.cpu_layout values (default: packed,plain on a "
                    "CPU, packed on CUDA)")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--backend", choices=["ipc", "nccl"], help="CUDA: start vLLM's weight-transfer engine of this "
                    "backend and time that path too (nccl: weights sent from cuda:1, the engine on cuda:0)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bucket-mb", type=int, default=256, help="engine.vllm.bucket_mb")
    ap.add_argument("--gen", default="1,8", help="request counts for the generation tokens/s table ('' skips it)")
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "memrl" / "bench-shapes"),
                    help="where the random-weight model folders are kept between runs")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    layouts = tuple(args.layouts.split(",")) if args.layouts else None
    gen = tuple(int(c) for c in args.gen.split(",") if c)
    rows: list[dict[str, Any]] = []
    for shape in args.shapes.split(","):
        if shape not in SHAPES:
            sys.exit(f"unknown shape {shape!r}: one of {', '.join(SHAPES)}")
        paths = args.paths.split(",") + ([args.backend] if args.backend else [])
        got = bench_shape(shape, args.dtype, paths, args.repeats, Path(args.cache), args.backend,
                          trainer_gpu=1 if args.backend == "nccl" else 0, bucket_mb=args.bucket_mb, layouts=layouts,
                          gen=gen)
        rows += got
        print(table(got, device_name()) + "\n\n" + generation_table(got) + "\n", flush=True)
    if len(args.shapes.split(",")) > 1:
        print(table(rows, device_name()) + "\n\n" + generation_table(rows))


if __name__ == "__main__":
    main()
