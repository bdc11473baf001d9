"""Kernels one decode step launches, per path of the HF engine (``engine.decode``), counted on the CPU.

Why: at one sequence in flight a CUDA graph's replay is bound by how many kernels it holds (each a few
microseconds on the device), not by memory bandwidth. The eager ops' count does not depend on the device;
inductor's may (its GPU code can fuse where its CPU code does not), so the compiled count is the CPU's. Measured
here: torch's profiler records every op of one static decode step (and, for ``compiled``, every
fused kernel inductor generated), and the count is what a GPU would launch: ops that only make views or
allocate are left out, a matrix product with bias (``addmm``) is one kernel as on a GPU.

    python bench/decode_kernels.py                      # qwen2.5-0.5b's shape, random weights, bfloat16
    python bench/decode_kernels.py --shape tiny-5m --dtype float32

Compiling the 24-layer shape takes about a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))

from real_shapes import SHAPES, hf_config  # noqa: E402

# ops that launch no kernel (views, allocation, dispatch wrappers), and ops that are one kernel on a GPU
# however the CPU implements them
NO_KERNEL = {"aten::view", "aten::as_strided", "aten::transpose", "aten::reshape", "aten::t", "aten::slice",
             "aten::unsqueeze", "aten::expand", "aten::select", "aten::alias", "aten::narrow", "aten::_unsafe_view",
             "aten::resolve_conj", "aten::empty", "aten::empty_strided", "aten::result_type", "aten::detach",
             "aten::lift_fresh", "aten::empty_like", "aten::split", "aten::chunk", "aten::permute"}
NO_KERNEL_ALONE = {"aten::to", "aten::_to_copy", "aten::contiguous", "aten::type_as", "aten::linear",
                   "aten::matmul", "aten::dropout", "aten::clone"}  # a kernel only through a child (a copy)
ONE_KERNEL = {"aten::addmm", "aten::mm", "aten::bmm", "aten::embedding", "aten::index_copy_", "aten::copy_",
              "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_efficient_attention"}


def count(events: Any) -> collections.Counter[str]:
    """Kernels in a profiler's event tree: an op that is one kernel, or one with no kernel-launching children."""
    out: collections.Counter[str] = collections.Counter()

    def walk(e: Any) -> None:
        name = e.name
        if name in NO_KERNEL:
            return
        if name in ONE_KERNEL or name.startswith("graph_") and "cpp_fused" in name:  # inductor's C++ kernels
            out["fused (inductor)" if name.startswith("graph_") else name] += 1
            return
        if e.cpu_children:
            for k in e.cpu_children:
                walk(k)
        elif name.startswith("aten::") and name not in NO_KERNEL_ALONE:
            out[name] += 1

    for e in events:
        if e.cpu_parent is None:
            walk(e)
    return out


def step_kernels(model: Any, mode: str) -> collections.Counter[str]:
    """One static decode step of one row (after a short generate that set the decoder up), profiled."""
    from memrl.engines.base import SamplingParams
    from memrl.engines.hf import HFEngine

    engine = HFEngine(model, decode=mode)

    async def warm() -> None:
        await engine.generate([5, 6, 7, 8], SamplingParams(max_new_tokens=3, greedy=True))
        await engine.close()

    asyncio.run(warm())
    decoder = engine._static
    assert decoder is not None and decoder.pool is not None
    with torch.inference_mode(), torch.profiler.profile() as prof:
        decoder._forward(1)
    return count(prof.profiler.function_events)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="qwen2.5-0.5b", choices=sorted(SHAPES))
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    args = ap.parse_args()
    import torch._inductor.config as inductor
    from transformers import AutoModelForCausalLM

    inductor.cpp.enable_kernel_profile = True  # each generated C++ kernel is a profiler event
    torch.manual_seed(0)
    cfg = hf_config(args.shape, args.dtype)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").to(getattr(torch, args.dtype)).eval()
    layers = cfg.num_hidden_layers
    print(f"one decode step of {args.shape} ({layers} layers, {args.dtype}, random weights), one row, CPU")
    for mode in ("static", "compiled"):
        kernels = step_kernels(model, mode)
        total = sum(kernels.values())
        top = ", ".join(f"{n.replace('aten::', '')} {c}" for n, c in kernels.most_common(6))
        print(f"{mode:>8}: {total} kernels = {total / layers:.1f} a layer ({top}, ...)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
