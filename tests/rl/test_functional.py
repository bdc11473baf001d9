import math

import pytest
import torch

from memrl.rl.functional import entropy_from_logits, logprobs_from_logits, masked_mean, masked_var, masked_whiten


def test_masked_stats_by_hand():
    v = torch.tensor([1.0, 2.0, 3.0, 4.0])
    m = torch.tensor([1.0, 1.0, 1.0, 0.0])
    assert masked_mean(v, m).item() == pytest.approx(2.0)
    # population var of [1,2,3] is 2/3; Bessel (3/2) gives 1
    assert masked_var(v, m).item() == pytest.approx(1.0)
    assert masked_var(v, m, unbiased=False).item() == pytest.approx(2 / 3)
    assert masked_whiten(v, m).tolist() == pytest.approx([-1.0, 0.0, 1.0, 2.0], abs=1e-6)
    assert masked_whiten(v, m, shift_mean=False).tolist() == pytest.approx([1.0, 2.0, 3.0, 4.0], abs=1e-6)
    with pytest.raises(ValueError):
        masked_var(v, torch.tensor([0.0, 1.0, 0.0, 0.0]))


def test_entropy_by_hand():
    assert entropy_from_logits(torch.tensor([0.0, 0.0])).item() == pytest.approx(math.log(2))
    ent = entropy_from_logits(torch.log(torch.tensor([0.25, 0.75])))
    assert ent.item() == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)))


def test_logprobs_with_temperature():
    logits = torch.tensor([[0.0, 2.0]])
    lp = logprobs_from_logits(logits, torch.tensor([1]), temperature=2.0)
    # softmax([0, 1]) at index 1 = e/(1+e)
    assert lp.item() == pytest.approx(math.log(math.e / (1 + math.e)))
