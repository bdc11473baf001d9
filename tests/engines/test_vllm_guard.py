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
