import importlib.util

import pytest

from memrl.engines.base import SamplingParams
from memrl.engines.vllm import require_vllm, to_vllm_params


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed")
def test_missing_vllm_gives_install_hint():
    with pytest.raises(ImportError, match=r"pip install 'memrl\[vllm\]'"):
        require_vllm()


def test_param_translation():
    kw = to_vllm_params(SamplingParams(max_new_tokens=7, temperature=0.7, top_p=0.9, top_k=20, seed=3,
                                       stop_token_ids=(2,)))
    assert kw == {"max_tokens": 7, "temperature": 0.7, "top_p": 0.9, "top_k": 20, "logprobs": 0,
                  "stop_token_ids": [2], "ignore_eos": True, "detokenize": False, "seed": 3}
    g = to_vllm_params(SamplingParams(greedy=True, top_k=5, top_p=0.5))
    assert (g["temperature"], g["top_p"], g["top_k"]) == (0.0, 1.0, -1)
    s = to_vllm_params(SamplingParams(stop=("\n\n", "END")))  # vLLM finds stop strings in text: detokenized
    assert (s["stop"], s["detokenize"], s["skip_special_tokens"]) == (["\n\n", "END"], True, True)


def test_a_cpu_engine_gets_a_kv_cache_that_leaves_room_for_the_trainer(monkeypatch):
    """Unset, vLLM's CPU build asks for ~92% of the memory and refuses to start beside a trainer."""
    from memrl.config.load import load_config
    from memrl.engines.vllm_args import build_engine_args, cpu_kv_default
    from memrl.models.resolve import resolve_model_path

    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    cfg = load_config(None, ["model.path=tiny", "engine.kind=vllm"])
    path = resolve_model_path("tiny")
    got = build_engine_args(cfg, path, cpu=True, sleep=False)["kv_cache_memory_bytes"]
    assert got == cpu_kv_default() and 0 < got <= 4 * 2**30
    assert "kv_cache_memory_bytes" not in build_engine_args(cfg, path, cpu=False, sleep=False)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "2")  # vLLM's own variable wins
    assert "kv_cache_memory_bytes" not in build_engine_args(cfg, path, cpu=True, sleep=False)
    sized = load_config(None, ["model.path=tiny", "engine.kind=vllm", "engine.vllm.kv_cache_memory=0.5"])
    assert build_engine_args(sized, path, cpu=True, sleep=False)["kv_cache_memory_bytes"] == 2**29
