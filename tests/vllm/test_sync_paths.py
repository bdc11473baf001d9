"""The weight-sync paths against vLLM's own weight-transfer interfaces (CPU: their planning; CUDA: end to end)."""

from __future__ import annotations

import asyncio
from dataclasses import asdict

import pytest

pytest.importorskip("vllm", reason="vLLM not installed: `make test-vllm` runs these with vLLM's CPU build")

import torch  # noqa: E402

from memrl.config import ConfigError, load_config  # noqa: E402
from memrl.engines.vllm_args import build_engine_args, plan_sync_path, trainer_gpu_index  # noqa: E402
from memrl.engines.vllm_gpu_sync import IPC_INIT, ipc_plan, ipc_update_info, nccl_init_info, pack_bucket, \
    state_source  # noqa: E402
from memrl.models.resolve import resolve_model_path  # noqa: E402
from tests.vllm.conftest import VLLM_OVERRIDES  # noqa: E402

CUDA = torch.cuda.is_available()


def state_dict() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(7, 4, generator=g).to(torch.bfloat16)
    return {"model.embed_tokens.weight": emb, "model.layers.0.self_attn.q_proj.weight": torch.randn(4, 4, generator=g),
            "model.layers.0.input_layernorm.weight": torch.ones(4), "lm_head.weight": emb}


def test_ipc_updates_are_what_vllms_ipc_engine_accepts_and_unpacks():
    from vllm.distributed.weight_transfer.ipc_engine import IPCWeightTransferInitInfo, IPCWeightTransferUpdateInfo
    from vllm.distributed.weight_transfer.packed_tensor import unpack_tensor

    assert IPCWeightTransferInitInfo(**IPC_INIT).packed  # the handshake: packed buckets from then on
    state = state_dict()
    tensors, plan = ipc_plan(state, bucket_bytes=64)
    assert sum(len(b.names) for b in plan) == 4  # every name, the tied one too
    for bucket in plan:
        info = IPCWeightTransferUpdateInfo(**ipc_update_info(bucket, {"uuid": ("args",)}))  # vLLM validates it
        assert asdict(info)["tensor_sizes"] == bucket.sizes
        buf = torch.zeros(bucket.nbytes, dtype=torch.uint8)
        pack_bucket(buf, bucket, tensors)
        dtypes = [getattr(torch, d) for d in info.dtype_names]
        for name, t in unpack_tensor(buf, info.names, info.shapes, dtypes, info.tensor_sizes):  # vLLM's unpacking
            assert torch.equal(t, state[name]), name


def test_nccl_source_agrees_with_its_metadata_and_the_group_has_one_rank_per_worker():
    from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerWeightTransferEngine

    source = state_source("cpu")
    source.items = list(state_dict().items())
    meta = source.metadata()
    assert [m.name for m in meta] == list(state_dict()) and meta[0].dtype == torch.bfloat16
    sent = list(NCCLTrainerWeightTransferEngine._checked_iter(source, meta))  # vLLM's own consistency check
    assert [n for n, _ in sent] == [m.name for m in meta]
    info = nccl_init_info("127.0.0.1", 29555, tensor_parallel=2, bucket_bytes=2**20)
    assert (info.world_size, info.rank, info.is_sender, info.packed, info.packed_buffer_size_bytes) == \
        (3, 0, True, True, 2**20)


def test_engine_args_start_vllms_transfer_engine_for_the_gpu_paths():
    cfg = load_config(None, VLLM_OVERRIDES)
    path = resolve_model_path("tiny32")
    assert "weight_transfer_config" not in build_engine_args(cfg, path, cpu=True, sleep=False, sync_path="shm")
    for backend in ("ipc", "nccl"):
        args = build_engine_args(cfg, path, cpu=False, sleep=False, sync_path=backend)
        assert args["weight_transfer_config"] == {"backend": backend}
    assert trainer_gpu_index(None, cuda=True) == 0 and trainer_gpu_index("cuda:3", cuda=True) == 3
    assert trainer_gpu_index("cpu", cuda=True) is None and trainer_gpu_index(None, cuda=False) is None


@pytest.mark.skipif(CUDA, reason="checks the CPU build")
def test_cpu_build_syncs_through_shared_memory_and_refuses_gpu_paths():
    assert plan_sync_path(load_config(None, VLLM_OVERRIDES))[0] == "shm"
    assert plan_sync_path(load_config(None, [*VLLM_OVERRIDES, "engine.vllm.sync_path=bytes"]))[0] == "bytes"
    for path in ("ipc", "nccl"):
        with pytest.raises(ConfigError, match=f"engine.vllm.sync_path={path} needs CUDA"):
            plan_sync_path(load_config(None, [*VLLM_OVERRIDES, f"engine.vllm.sync_path={path}"]))


def _gpu_round_trip(overrides: list[str], want_path: str) -> None:  # pragma: no cover - GPU only
    from tests.vllm.test_engine import assert_same, base_model, greedy, perturbed

    from memrl.engines.hf import HFEngine
    from memrl.engines.vllm import VLLMEngine

    cfg = load_config(None, [*VLLM_OVERRIDES, "engine.gpu_memory_utilization=0.2", *overrides])
    eng = VLLMEngine.from_config(cfg)
    try:
        assert eng.sync_path == want_path
        model = base_model()
        state = perturbed(model)
        model.load_state_dict(state)
        device = cfg.engine.device or "cuda:0"
        asyncio.run(eng.update_weights({k: v.to(device) for k, v in state.items()}))
        assert eng.last_sync_path == want_path and eng.last_sync["sync/gb_per_s"] > 0
        assert_same(asyncio.run(greedy(eng)), asyncio.run(greedy(HFEngine(model))), tol=1e-3)
    finally:
        eng.shutdown()


@pytest.mark.skipif(not CUDA, reason="CUDA IPC needs a GPU")
def test_ipc_sync_on_the_trainers_gpu():  # pragma: no cover - GPU only
    _gpu_round_trip([], "ipc")


@pytest.mark.skipif(not CUDA or torch.cuda.device_count() < 2, reason="NCCL to another GPU needs two GPUs")
def test_nccl_sync_from_another_gpu():  # pragma: no cover - GPU only
    _gpu_round_trip(["engine.device=cuda:1"], "nccl")
