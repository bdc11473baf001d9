"""Planning of the vLLM weight-sync paths, without vLLM: buckets, aliases, path choice, shared files, in-place
writes, metrics."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from memrl.config import ConfigError
from memrl.engines.vllm_args import check_cpu_layout
from memrl.engines.vllm_gpu_sync import ipc_plan, ipc_update_info, pack_bucket
from memrl.engines.vllm_inplace import balance, layout_of, map_shared, write_shared
from memrl.engines.vllm_sync import ShmSlots, choose_path, copy_into, layer_key, plan_buckets, with_aliases, \
    write_bucket
from memrl.train.engine_sync import SYNC_PATH_CODES, pool_sync_stats, sync_stats

F32 = torch.float32


def layout(*entries):
    return [(name, shape, dtype) for name, shape, dtype in entries]


def test_layer_keys():
    assert layer_key("model.layers.12.self_attn.q_proj.weight") == "model.layers.12"
    assert layer_key("model.embed_tokens.weight") == ""
    assert layer_key("visual.blocks.0.attn.qkv.weight") == "visual.blocks.0"


def test_buckets_hold_whole_layers_at_aligned_offsets():
    lay = layout(("model.embed_tokens.weight", (10, 4), F32),           # 160 B
                 ("model.layers.0.q.weight", (4, 4), F32),              # 64 B
                 ("model.layers.0.k.weight", (3,), F32),                # 12 B -> padded to 64
                 ("model.layers.1.q.weight", (4, 4), F32),              # 64 B
                 ("model.layers.1.k.weight", (5,), torch.bfloat16),     # 10 B
                 ("model.norm.weight", (4,), F32))                      # 16 B
    plan = plan_buckets(lay, bucket_bytes=256, align=64)
    # embed (192 padded) alone: layer 0 (128) would pass 256; layer 0 + layer 1 (128 + 128) fill one; norm last
    assert [b.names for b in plan] == [["model.embed_tokens.weight"],
                                       ["model.layers.0.q.weight", "model.layers.0.k.weight",
                                        "model.layers.1.q.weight", "model.layers.1.k.weight"],
                                       ["model.norm.weight"]]
    assert plan[1].offsets == [0, 64, 128, 192] and plan[1].sizes == [64, 12, 64, 10]
    assert plan[1].dtypes == ["float32", "float32", "float32", "bfloat16"] and plan[1].shapes[0] == [4, 4]
    assert plan[1].nbytes == 202 and plan[1].payload == 150
    assert plan_buckets(lay, bucket_bytes=100, align=64)[1].names == ["model.layers.0.q.weight",
                                                                     "model.layers.0.k.weight"]  # over 100: alone
    dense = plan_buckets(lay, bucket_bytes=10**6, align=1)  # back to back, 4-byte dtypes before the bf16 one
    assert len(dense) == 1 and dense[0].names[-1] == "model.layers.1.k.weight"
    assert dense[0].offsets == [0, 160, 224, 236, 300, 316] and dense[0].nbytes == 326


def test_tied_alias_follows_its_original_and_shares_its_bytes():
    emb = torch.randn(6, 4)
    state = {"model.embed_tokens.weight": emb, "model.layers.0.w": torch.randn(4, 4),
             "model.norm.weight": torch.ones(4), "lm_head.weight": emb,
             "copy.weight": emb.clone()}  # equal values, own memory: not an alias
    items, aliases = with_aliases(state)
    assert [n for n, _ in items] == ["model.embed_tokens.weight", "lm_head.weight", "model.layers.0.w",
                                     "model.norm.weight", "copy.weight"]
    assert aliases == {1: 0}
    plan = plan_buckets([(n, t.shape, t.dtype) for n, t in items], bucket_bytes=64, aliases=aliases)
    first = plan[0]
    assert first.names == ["model.embed_tokens.weight", "lm_head.weight"]
    assert first.offsets == [0, 0] and first.indices == [0, 0] and first.payload == 96
    assert sum(b.payload for b in plan) == 96 + 64 + 16 + 96


def test_write_bucket_round_trip_through_a_shared_file(tmp_path):
    base = torch.arange(12, dtype=F32).reshape(3, 4)
    state = {"model.embed_tokens.weight": base, "lm_head.weight": base,
             "model.layers.0.t": torch.arange(6, dtype=F32).reshape(2, 3).t(),  # not contiguous
             "model.layers.0.h": torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16)}
    items, aliases = with_aliases(state)
    tensors = [t for _, t in items]
    (bucket,) = plan_buckets([(n, t.shape, t.dtype) for n, t in items], bucket_bytes=10**6, aliases=aliases)
    slots = ShmSlots(str(tmp_path))
    path, buf, old = slots.get(0, bucket.nbytes)
    write_bucket(buf, bucket, tensors)
    mapped = torch.from_file(str(path), shared=True, size=bucket.nbytes, dtype=torch.uint8)  # as a worker maps it
    for name, dtype, shape, off, size in zip(bucket.names, bucket.dtypes, bucket.shapes, bucket.offsets,
                                             bucket.sizes):
        got = mapped[off: off + size].view(getattr(torch, dtype)).view(shape)
        assert torch.equal(got, state[name]), name
    assert old is None
    slots.close()


def test_shm_slots_are_reused_regrown_and_leave_no_names_behind(tmp_path):
    keep = tmp_path / "someone-elses-file"
    keep.write_text("x")
    slots = ShmSlots(str(tmp_path), count=2)
    p0, b0, old0 = slots.get(0, 100)
    p1, _, _ = slots.get(1, 100)
    assert p0 != p1 and p0.parent == tmp_path and p0.name.startswith("memrl-sync-slot0-") and old0 is None
    assert slots.get(2, 80)[:2] == (p0, b0)  # slot 0 again, big enough: the same file and mapping
    slots.settle(p0)  # the workers mapped it: its name goes, the memory stays mapped
    assert not p0.exists()
    b0[:3] = torch.tensor([7, 8, 9], dtype=torch.uint8)
    assert b0[:3].tolist() == [7, 8, 9]
    p2, b2, old2 = slots.get(2, 300)  # too small: a new file, and the old one for the workers to drop
    assert old2 == p0 and p2 != p0 and p2.exists() and b2.numel() == 300
    slots.close()
    assert sorted(x.name for x in tmp_path.iterdir()) == ["someone-elses-file"] and keep.read_text() == "x"


@pytest.mark.parametrize(("requested", "cuda", "tp", "gpu", "shm", "want"), [
    ("auto", False, 1, None, "/dev/shm", "shm"),
    ("auto", False, 1, None, None, "bytes"),
    ("auto", True, 1, 0, "/dev/shm", "ipc"),      # colocated on the engine's only GPU
    ("auto", True, 1, 1, "/dev/shm", "nccl"),     # the engine on GPU 0, the trainer on GPU 1
    ("auto", True, 2, 0, "/dev/shm", "shm"),      # the trainer shares GPU 0 with a 2-GPU engine: no NCCL rank
    ("auto", True, 2, 2, None, "nccl"),
    ("bytes", True, 1, 0, "/dev/shm", "bytes"),
])
def test_path_follows_placement(requested, cuda, tp, gpu, shm, want):
    assert choose_path(requested, cuda=cuda, tensor_parallel=tp, trainer_gpu=gpu, shm_dir=shm)[0] == want


@pytest.mark.parametrize(("requested", "cuda", "tp", "gpu", "shm", "match"), [
    ("ipc", False, 1, None, "/dev/shm", "sync_path=ipc needs CUDA"),
    ("ipc", True, 2, 0, "/dev/shm", "tensor_parallel_size=1"),
    ("nccl", True, 1, 0, "/dev/shm", "one rank per GPU"),
    ("shm", False, 1, None, None, "shared-memory folder"),
    ("fast", False, 1, None, None, "auto or one of"),
])
def test_a_path_that_cannot_work_here_is_refused(requested, cuda, tp, gpu, shm, match):
    with pytest.raises(ValueError, match=match):
        choose_path(requested, cuda=cuda, tensor_parallel=tp, trainer_gpu=gpu, shm_dir=shm)


def test_ipc_buckets_are_packed_back_to_back_with_ties_sent_twice():
    emb = torch.randn(3, 5, dtype=torch.bfloat16)
    state = {"model.embed_tokens.weight": emb, "model.layers.0.w": torch.randn(2, 2), "lm_head.weight": emb}
    tensors, plan = ipc_plan(state, bucket_bytes=40)  # 30-byte bf16 tensors: a float32 after one would be askew
    assert [b.names for b in plan] == [["model.embed_tokens.weight"], ["model.layers.0.w"], ["lm_head.weight"]]
    assert [b.sizes for b in plan] == [[30], [16], [30]]
    info = ipc_update_info(plan[0], {"gpu-uuid": ("handle",)})
    assert info == {"names": ["model.embed_tokens.weight"], "dtype_names": ["bfloat16"], "shapes": [[3, 5]],
                    "ipc_handles": {"gpu-uuid": ("handle",)}, "tensor_sizes": [30]}
    (whole,) = ipc_plan(state, bucket_bytes=10**6)[1]
    buf = torch.zeros(whole.nbytes, dtype=torch.uint8)
    pack_bucket(buf, whole, tensors)
    assert whole.names == ["model.layers.0.w", "model.embed_tokens.weight", "lm_head.weight"]  # float32 first
    parts = buf.split(whole.sizes)  # how vLLM's packed consumer cuts the buffer
    for part, name, dtype, shape in zip(parts, whole.names, whole.dtypes, whole.shapes):
        assert torch.equal(part.view(getattr(torch, dtype)).view(shape), state[name])


class _Engine:
    last_sync_path = "shm"
    last_sync = {"sync_mb": 512.0, "time/sync_engine": 0.5, "sync/gb_per_s": 1.07}


class _Pool:
    weight_sync = "collective"
    last_sync_s = 0.25


def test_sync_metrics_name_the_path_and_its_speed():
    assert sync_stats(_Engine()) == {"sync_mb": 512.0, "time/sync_engine": 0.5, "sync/gb_per_s": 1.07,
                                     "sync/path": SYNC_PATH_CODES["shm"]}
    assert sync_stats(object()) == {}
    weights = {"a": torch.zeros(1000, dtype=F32), "b": torch.zeros(500, dtype=torch.bfloat16)}  # 5000 bytes
    got = pool_sync_stats(_Pool(), weights)
    assert got["sync/path"] == SYNC_PATH_CODES["collective"] == 7.0
    assert got["sync/gb_per_s"] == pytest.approx(5000 / 1e9 / 0.25)
    assert pool_sync_stats(_Pool(), None) == {}
    assert len(set(SYNC_PATH_CODES.values())) == len(SYNC_PATH_CODES)


def test_copy_into_writes_the_bytes_of_every_kind_of_tensor():
    buf = torch.zeros(2**18, dtype=torch.uint8)
    small = torch.arange(10, dtype=F32)                               # numpy's memcpy
    big = torch.arange(2**15, dtype=F32)                              # 128 KiB: torch's byte copy
    strided = torch.arange(6, dtype=F32).reshape(2, 3).t()            # not contiguous: copied as a tensor
    converted = torch.tensor([1.5, -2.25, 3.0], dtype=F32)            # served as bfloat16
    assert copy_into(buf, 0, small, "float32", [10]) == 40
    assert copy_into(buf, 64, big, "float32", [2**15]) == 2**17
    assert copy_into(buf, 2**17 + 64, strided, "float32", [3, 2]) == 24
    assert copy_into(buf, 2**17 + 128, converted, "bfloat16", [3]) == 6
    assert buf[:40].view(F32).tolist() == list(range(10))
    assert torch.equal(buf[64: 64 + 2**17].view(F32), big)
    assert buf[2**17 + 64: 2**17 + 88].view(F32).tolist() == [0, 3, 1, 4, 2, 5]
    assert buf[2**17 + 128: 2**17 + 134].view(torch.bfloat16).tolist() == [1.5, -2.25, 3.0]
    assert buf[40:64].eq(0).all() and buf[2**17 + 134:].eq(0).all()  # nothing outside the tensors


def test_in_place_writes_each_served_tensor_where_the_worker_said(tmp_path):
    emb = torch.arange(6, dtype=F32).reshape(3, 2)
    state = {"model.embed_tokens.weight": emb, "model.layers.0.q.weight": torch.full((2, 2), 7.0),
             "lm_head.weight": emb}  # tied: the worker's loaders skip it, so it has no place of its own
    file = tmp_path / "memrl-weights-x"
    file.write_bytes(bytes(128))
    answer = (str(file), 128, [("model.layers.0.q.weight", 0, "bfloat16", [2, 2]),
                               ("model.embed_tokens.weight", 64, "float32", [3, 2])])
    shared = map_shared(answer, state)
    assert not file.exists()  # both sides map it: its name goes at once
    assert shared.fits(state) and not shared.fits({"model.layers.0.q.weight": state["model.layers.0.q.weight"]})
    assert not shared.fits({**state, "model.layers.0.q.weight": torch.zeros(2, 3)})  # another shape
    assert write_shared(shared, state) == 8 + 24
    assert shared.buf[:8].view(torch.bfloat16).tolist() == [7.0] * 4
    assert torch.equal(shared.buf[64:88].view(F32).view(3, 2), emb)
    shared.buf.zero_()
    with ThreadPoolExecutor(2) as pool:  # the same bytes from two copying threads
        assert write_shared(shared, state, pool, lanes=2) == 8 + 24
    assert shared.buf[:8].view(torch.bfloat16).tolist() == [7.0] * 4
    assert torch.equal(shared.buf[64:88].view(F32).view(3, 2), emb)
    assert layout_of(state) == (list(state), [[3, 2], [2, 2], [3, 2]], ["float32", "float32", "float32"])


def test_plain_layout_needs_the_cpu_build_and_eager_mode():
    assert check_cpu_layout("plain", cpu=True, engine_args={"enforce_eager": True}) == "plain"
    assert check_cpu_layout("packed", cpu=False, engine_args={}) == "packed"
    with pytest.raises(ConfigError, match="cpu_layout=plain is for vLLM's CPU build"):
        check_cpu_layout("plain", cpu=False, engine_args={"enforce_eager": True})
    with pytest.raises(ConfigError, match="needs engine.vllm.enforce_eager=true"):
        check_cpu_layout("plain", cpu=True, engine_args={"enforce_eager": False})


def test_copy_lanes_cover_every_byte_once_with_even_loads():
    srcs = [np.arange(n, dtype=np.uint8) for n in (3 * 2**20, 2**20 + 5, 1000, 10, 0)]
    dsts = [np.zeros_like(a) for a in srcs]
    lanes = balance(list(zip(dsts, srcs, strict=True)), 2)
    loads = [sum(s.nbytes for _, s in lane) for lane in lanes]
    assert sum(loads) == sum(a.nbytes for a in srcs) and abs(loads[0] - loads[1]) <= 1010  # big arrays were cut
    assert max(s.nbytes for lane in lanes for _, s in lane) <= 1.5 * 2**20
    for lane in lanes:
        for d, s in lane:
            np.copyto(d, s)
    assert all(np.array_equal(d, s) for d, s in zip(dsts, srcs, strict=True))
    assert len(balance([(dsts[0], srcs[0])], 1)[0]) == 1  # one lane: nothing cut
