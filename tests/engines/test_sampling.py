import math

import torch

from memrl.engines.base import SamplingParams
from memrl.engines.sampling import filter_logits, select_token


def test_top_k_keeps_k_largest():
    out = filter_logits(torch.tensor([1.0, 3.0, 2.0, 0.0]), top_k=2, top_p=1.0)
    assert torch.isinf(out[[0, 3]]).all() and out[1] == 3.0 and out[2] == 2.0


def test_top_p_nucleus_by_hand():
    # probs = [0.5, 0.25, 0.125, 0.125] (logits are log-probs). top_p=0.6: 0.5 < 0.6 so the
    # second token is still needed; mass before the third is 0.75 >= 0.6 -> dropped.
    logits = torch.log(torch.tensor([0.5, 0.25, 0.125, 0.125]))
    out = filter_logits(logits, top_k=0, top_p=0.6)
    assert torch.isfinite(out[:2]).all() and torch.isinf(out[2:]).all()
    # top_p smaller than the top token's mass keeps exactly that token
    assert torch.isfinite(filter_logits(logits, 0, 0.3)).sum() == 1


def test_greedy_and_logprob_of_scaled_distribution():
    logits = torch.tensor([0.0, 1.0, 2.0])
    tok, lp = select_token(logits, SamplingParams(greedy=True), None)
    assert tok == 2 and math.isclose(lp, float(torch.log_softmax(logits, -1)[2]), rel_tol=1e-6)
    # sampling at temperature 2 with top_k=1 must pick the argmax; its logprob is under logits/2
    tok, lp = select_token(logits, SamplingParams(temperature=2.0, top_k=1), torch.Generator().manual_seed(0))
    assert tok == 2 and math.isclose(lp, float(torch.log_softmax(logits / 2, -1)[2]), rel_tol=1e-6)


def test_sampling_params_validation():
    import pytest

    with pytest.raises(ValueError):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError):
        SamplingParams(temperature=-1)
    assert SamplingParams(temperature=0).is_greedy
