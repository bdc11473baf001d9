"""``bench/decode_kernels.py`` counts what a GPU would launch from a profiler's event tree."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import decode_kernels  # noqa: E402


@dataclass
class Event:
    name: str
    cpu_children: list["Event"] = field(default_factory=list)
    cpu_parent: "Event | None" = None


def tree(name: str, *kids: Event) -> Event:
    e = Event(name, list(kids))
    for k in kids:
        k.cpu_parent = e
    return e


def test_views_and_no_op_casts_are_not_kernels_and_composites_count_their_kernels():
    events = [
        tree("aten::linear", tree("aten::t"), tree("aten::addmm", tree("aten::copy_"), tree("aten::mm"))),  # 1
        tree("aten::to"),  # same dtype: no copy, no kernel
        tree("aten::to", tree("aten::_to_copy", tree("aten::empty_strided"), tree("aten::copy_"))),  # 1
        tree("aten::view"), tree("aten::mul"), tree("aten::rsqrt"),  # 0, 1, 1
        tree("Torch-Compiled Region", tree("## Call CompiledFxGraph ##",
                                           tree("graph_0_cpp_fused_add_mean_mul_pow_rsqrt_0"), tree("aten::mm"))),
    ]
    flat = []

    def collect(e):
        flat.append(e)
        for k in e.cpu_children:
            collect(k)

    for e in events:
        collect(e)
    got = decode_kernels.count(flat)
    assert got == {"aten::addmm": 1, "aten::copy_": 1, "aten::mul": 1, "aten::rsqrt": 1, "fused (inductor)": 1,
                   "aten::mm": 1}
