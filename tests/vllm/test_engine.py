"""The in-process vLLM engine against transformers on the same weights (vLLM's CPU build in CI)."""

from __future__ import annotations

import asyncio
import threading

import pytest

pytest.importorskip("vllm", reason="vLLM not installed: `make test-vllm` runs these with vLLM's CPU build")

import torch  # noqa: E402

from memrl.config import ConfigError, load_config  # noqa: E402
from memrl.engines.base import SamplingParams  # noqa: E402
from memrl.engines.hf import HFEngine  # noqa: E402
from memrl.engines.vllm import VLLMEngine  # noqa: E402
from memrl.engines.vllm_args import build_engine_args, sleep_available  # noqa: E402
from memrl.models.resolve import load_model, resolve_model_path  # noqa: E402
from memrl.train.engine_sync import adapter_payload  # noqa: E402
from memrl.train.policy import build_policy, merged_state_dict  # noqa: E402
from tests.vllm.conftest import VLLM_OVERRIDES  # noqa: E402

PROMPTS = [[5, 6, 7, 8, 9], [10, 11, 12], [100, 200, 30, 40, 50, 60], list(range(20, 80))]


@pytest.fixture(scope="module")
def engine():
    eng = VLLMEngine.from_config(load_config(None, VLLM_OVERRIDES))
    yield eng
    eng.shutdown()


def base_model():
    return load_model(resolve_model_path("tiny32"), "float32", "cpu")


async def greedy(eng, prompts=PROMPTS, n: int = 12):
    sp = SamplingParams(max_new_tokens=n, greedy=True)
    return await asyncio.gather(*(eng.generate(p, sp) for p in prompts))


def assert_same(got, expected, tol: float = 1e-4) -> None:
    for g, e in zip(got, expected, strict=True):
        assert g.token_ids == e.token_ids
        assert g.finish_reason == e.finish_reason
        assert max(abs(a - b) for a, b in zip(g.logprobs, e.logprobs, strict=True)) < tol


def perturbed(model, scale: float = 0.05, seed: int = 0) -> dict[str, torch.Tensor]:
    """New weights for every tensor; tied embeddings stay tied, as a trainer's merged weights are."""
    g = torch.Generator().manual_seed(seed)
    state = {k: v + scale * torch.randn(v.shape, generator=g) for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    return state


def test_greedy_equals_hf_from_any_event_loop_or_thread(engine):
    expected = asyncio.run(greedy(HFEngine(base_model())))
    assert_same(asyncio.run(greedy(engine)), expected)
    assert_same(asyncio.run(greedy(engine)), expected)  # a second loop: an AsyncLLM bound to the first died here
    box: list = []
    t = threading.Thread(target=lambda: box.append(asyncio.run(greedy(engine))))
    t.start()
    t.join(120)
    assert_same(box[0], expected)


def test_stop_tokens_and_length_limits_match_hf(engine):
    hf = HFEngine(base_model())
    free = asyncio.run(greedy(hf, PROMPTS[:1], n=6))[0]
    stop = free.token_ids[2]
    sp = SamplingParams(max_new_tokens=6, greedy=True, stop_token_ids=(stop,))
    got = asyncio.run(engine.generate(PROMPTS[0], sp))
    want = asyncio.run(hf.generate(PROMPTS[0], sp))
    assert got.token_ids == want.token_ids and got.token_ids[-1] == stop and got.finish_reason == "stop"


def test_stop_strings_end_where_the_hf_engine_ends(engine):
    """vLLM and the HF engine (given the tokenizer) keep the same tokens: through the one completing the stop."""
    from memrl.models.resolve import load_tokenizer

    tok = load_tokenizer("tiny32")
    hf = HFEngine(base_model(), tokenizer=tok)
    free = asyncio.run(greedy(hf, PROMPTS[:1], n=24))[0]
    text = tok.decode(free.token_ids[10:13], skip_special_tokens=True).strip()
    assert text, "greedy tokens 10-13 of the tiny model decode to text"
    sp = SamplingParams(max_new_tokens=24, greedy=True, stop=(text,))
    got = asyncio.run(engine.generate(PROMPTS[0], sp))
    want = asyncio.run(hf.generate(PROMPTS[0], sp))
    assert got.finish_reason == want.finish_reason == "stop" and got.token_ids == want.token_ids
    assert len(got.token_ids) < 24 and got.token_ids == free.token_ids[:len(got.token_ids)]


def test_interrupt_returns_the_tokens_so_far(engine):
    """interrupt() aborts the requests in flight: each returns its tokens so far (abort), the greedy prefix."""
    long = SamplingParams(max_new_tokens=3000, greedy=True)

    async def go():
        task = asyncio.ensure_future(engine.generate(PROMPTS[0], long))
        await asyncio.sleep(0.5)
        engine.interrupt()
        cut = await asyncio.wait_for(task, 60)
        ref = await engine.generate(PROMPTS[0], long.with_(max_new_tokens=max(1, len(cut.token_ids))))
        return cut, ref

    cut, ref = asyncio.run(go())
    assert cut.finish_reason == "abort" and 0 < len(cut.token_ids) < 3000
    assert cut.token_ids == ref.token_ids and len(cut.logprobs) == len(cut.token_ids)
    assert max(abs(a - b) for a, b in zip(cut.logprobs, ref.logprobs)) < 1e-4


def test_update_weights_serves_the_new_weights(engine):
    model = base_model()
    before = asyncio.run(greedy(engine))
    state = perturbed(model)
    model.load_state_dict(state)
    asyncio.run(engine.update_weights(state))
    try:
        after = asyncio.run(greedy(engine))
        assert_same(after, asyncio.run(greedy(HFEngine(model))))
        assert [r.logprobs for r in after] != [r.logprobs for r in before]
        assert engine.last_sync["sync_mb"] > 0
    finally:
        asyncio.run(engine.update_weights(base_model().state_dict()))
    assert_same(asyncio.run(greedy(engine)), before)


def test_every_cpu_sync_path_serves_the_new_weights(engine):
    """Shared memory in many small buckets (files reused and regrown), and bytes over RPC, as HF computes."""
    assert engine.sync_path == "shm"  # the default where /dev/shm exists
    model = base_model()
    state = perturbed(model, seed=3)
    model.load_state_dict(state)
    want = asyncio.run(greedy(HFEngine(model)))
    try:
        for path, bucket in (("shm", 8 * 2**10), ("shm", 64 * 2**10), ("bytes", 64 * 2**10)):
            engine.sync_path, engine.bucket_bytes = path, bucket
            asyncio.run(engine.update_weights(base_model().state_dict()))
            asyncio.run(engine.update_weights(state))
            assert engine.last_sync_path == path
            assert engine.last_sync["sync/gb_per_s"] > 0 and engine.last_sync["sync_mb"] > 1
            assert_same(asyncio.run(greedy(engine)), want)
    finally:
        engine.sync_path, engine.bucket_bytes = "shm", 256 * 2**20
        asyncio.run(engine.update_weights(base_model().state_dict()))


def test_seeded_long_prompts_under_concurrency_are_reproducible(engine):
    """Prompts that do not fit one scheduler step together; seeded sampling must neither crash nor vary."""
    prompts = [[(7 * i + j) % 200 + 5 for j in range(1500)] for i in range(4)]
    sp = SamplingParams(max_new_tokens=8, temperature=1.0, seed=11)

    async def batch():
        return await asyncio.gather(*(engine.generate(p, sp) for p in prompts))

    a, b = asyncio.run(batch()), asyncio.run(batch())
    assert [r.token_ids for r in a] == [r.token_ids for r in b]
    assert all(len(r.token_ids) == 8 for r in a)


def test_adapter_only_sync_equals_merged_sync(engine):
    cfg = load_config(None, [*VLLM_OVERRIDES, "lora.enabled=true", "lora.r=8", "engine.vllm.lora_sync=adapter"])
    policy = build_policy(cfg, device="cpu")
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:  # peft starts B at zero: make the adapter change the outputs
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
    base = asyncio.run(greedy(engine))
    lora_engine = VLLMEngine.from_config(cfg)
    try:
        asyncio.run(lora_engine.update_adapter(*adapter_payload(policy)))
        asyncio.run(engine.update_weights(merged_state_dict(policy)))
        merged = asyncio.run(greedy(engine))
        assert_same(asyncio.run(greedy(lora_engine)), merged)
        assert [r.logprobs for r in merged] != [r.logprobs for r in base]
        assert 0 < lora_engine.last_sync["sync_mb"] < engine.last_sync["sync_mb"]
    finally:
        lora_engine.shutdown()
        asyncio.run(engine.update_weights(base_model().state_dict()))


def test_engine_args_defaults_and_checks():
    cfg = load_config(None, VLLM_OVERRIDES)
    path = resolve_model_path("tiny32")
    cpu = build_engine_args(cfg, path, cpu=True, sleep=False)
    assert cpu["enable_chunked_prefill"] is False and cpu["max_num_batched_tokens"] >= 4096
    assert cpu["kv_cache_memory_bytes"] == 2**28 and cpu["enforce_eager"] is True
    assert cpu["worker_extension_cls"] == "memrl.engines.vllm_worker.MemrlWorkerExtension"
    gpu = build_engine_args(cfg, path, cpu=False, sleep=True)
    assert "enable_chunked_prefill" not in gpu and gpu["enable_sleep_mode"] is True
    passthrough = load_config(None, [*VLLM_OVERRIDES, 'engine.vllm.args={"swap_space": 2}'])
    assert build_engine_args(passthrough, path, cpu=True, sleep=False)["swap_space"] == 2
    typo = load_config(None, [*VLLM_OVERRIDES, 'engine.vllm.args={"max_num_seq": 2}'])
    with pytest.raises(ConfigError, match=r"engine\.vllm\.args\.max_num_seq.*did you mean 'engine\.vllm\.args\.max_num_seqs'"):
        VLLMEngine.from_config(typo)
    with pytest.raises(ConfigError, match="did you mean 'engine.vllm.max_model_len'"):
        load_config(None, [*VLLM_OVERRIDES, "engine.vllm.max_model_length=10"])


@pytest.mark.skipif(sleep_available(), reason="this platform has sleep mode")
def test_sleep_mode_is_off_where_the_platform_lacks_it(capsys):
    with pytest.raises(ConfigError, match="no sleep mode on this platform"):
        VLLMEngine.from_config(load_config(None, [*VLLM_OVERRIDES, "engine.vllm.sleep=on"]))


@pytest.mark.skipif(not sleep_available(), reason="sleep mode needs a GPU platform")
def test_sleep_and_wake_keep_the_weights():  # pragma: no cover - GPU only
    eng = VLLMEngine.from_config(load_config(None, [*VLLM_OVERRIDES, "engine.vllm.sleep=on"]))
    try:
        before = asyncio.run(greedy(eng))
        asyncio.run(eng.sleep(1))
        asyncio.run(eng.wake_up())
        assert_same(asyncio.run(greedy(eng)), before)
    finally:
        eng.shutdown()
