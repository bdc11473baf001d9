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


def test_batched_rows_keep_their_own_parameters_and_draws():
    """A mixed batch (greedy, top-k 1, nucleus, plain) picks per row what each row picks alone."""
    from memrl.engines.sampling import select_tokens

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 50, generator=g) * 3
    params = [SamplingParams(greedy=True), SamplingParams(temperature=0.5, top_k=1),
              SamplingParams(temperature=1.3, top_p=0.5), SamplingParams(temperature=1.0),
              SamplingParams(temperature=0.8, top_k=5, top_p=0.9)]
    for trial in range(20):
        gens = [torch.Generator().manual_seed(100 * trial + i) for i in range(5)]
        toks, lps = select_tokens(logits, params, gens)
        for i, p in enumerate(params):
            alone = select_token(logits[i], p, torch.Generator().manual_seed(100 * trial + i))
            assert toks[i] == alone[0] and math.isclose(lps[i], alone[1], abs_tol=1e-6)
        assert toks[0] == int(torch.argmax(logits[0])) and toks[1] == int(torch.argmax(logits[1]))
        assert toks[2] in set(torch.isfinite(filter_logits(logits[2] / 1.3, 0, 0.5)).nonzero().flatten().tolist())
        allowed = torch.isfinite(filter_logits(logits[4] / 0.8, 5, 0.9)).nonzero().flatten().tolist()
        assert toks[4] in allowed and len(allowed) <= 5
        for i, p in enumerate(params):
            t = 1.0 if p.is_greedy else p.temperature
            assert math.isclose(lps[i], float(torch.log_softmax(logits[i] / t, -1)[toks[i]]), abs_tol=1e-5)


def test_batched_filter_equals_one_row_at_a_time_by_hand():
    from memrl.engines.sampling import filter_logits_batch

    logits = torch.log(torch.tensor([[0.5, 0.25, 0.125, 0.125], [0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]]))
    out = filter_logits_batch(logits, torch.tensor([0, 2, 0]), torch.tensor([0.6, 1.0, 1.0]))
    assert torch.isfinite(out).tolist() == [[True, True, False, False], [False, False, True, True], [True] * 4]


def test_draws_follow_the_distribution_and_skip_zero_mass_tokens():
    """Seeded, so deterministic: 4000 draws from [0.6, 0.3, 0.1, 0] land near those frequencies."""
    from memrl.engines.sampling import select_tokens

    logits = torch.log(torch.tensor([0.6, 0.3, 0.1, 0.0])).repeat(4000, 1)
    gen = torch.Generator().manual_seed(0)
    toks, _ = select_tokens(logits, [SamplingParams(temperature=1.0)] * 4000, [gen] * 4000)
    counts = torch.bincount(torch.tensor(toks), minlength=4) / 4000
    assert counts[3] == 0 and torch.allclose(counts[:3], torch.tensor([0.6, 0.3, 0.1]), atol=0.03)


def test_overflowing_distribution_raises_like_multinomial():
    import pytest

    from memrl.engines.sampling import select_tokens

    logits = torch.tensor([[0.0, 1.0, 2.0], [0.0, 1.0, 2.0]])
    with pytest.raises(RuntimeError):
        select_tokens(logits, [SamplingParams(greedy=True), SamplingParams(temperature=1e-45)], [None, None])


def test_a_draw_at_the_top_of_the_cdf_lands_on_the_last_token_with_mass():
    from memrl.engines.sampling import _inverse_cdf

    probs = torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.2, 0.3, 0.5, 0.0]])
    assert _inverse_cdf(probs, torch.tensor([1.0, 1.0, 0.9999], dtype=torch.float64)).tolist() == [1, 1, 2]
    assert _inverse_cdf(probs, torch.tensor([0.0, 0.0, 0.0], dtype=torch.float64)).tolist() == [0, 1, 0]


def test_a_top_p_too_small_for_float32_keeps_the_most_likely_token():
    logits = torch.tensor([1.0, 3.0, 2.0, 0.0])
    for p in (1e-300, 1e-50, 1e-9):  # 1e-300 is 0.0 in float32: nothing would be kept
        out = filter_logits(logits, top_k=0, top_p=p)
        assert torch.isfinite(out).tolist() == [False, True, False, False]


class _HostReads(torch.overrides.TorchFunctionMode):
    """Counts the calls that copy a tensor's values to Python (on a GPU each one waits for the device)."""

    NAMES = {"tolist", "item", "numpy", "__bool__", "__int__", "__float__", "__index__", "__array__", "cpu"}

    def __init__(self):
        super().__init__()
        self.reads = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in self.NAMES:
            self.reads.append(func.__name__)
        return func(*args, **(kwargs or {}))


def test_a_decode_step_reads_the_device_once_whatever_the_mix_of_rows():
    """Tokens, log-probs and the finiteness check come back in one read; which rows filter is known from the
    parameters. The rows pick what they pick alone (the batched draw's contract)."""
    from memrl.engines.sampling import select_tokens

    logits = torch.randn(5, 40, generator=torch.Generator().manual_seed(3))
    params = [SamplingParams(greedy=True), SamplingParams(temperature=0.7, top_k=4), SamplingParams(top_p=0.5),
              SamplingParams(temperature=1.3), SamplingParams(temperature=0.6, top_k=7, top_p=0.9)]
    alone = [select_token(logits[i], p, torch.Generator().manual_seed(i)) for i, p in enumerate(params)]
    for rows in ([0, 1, 2, 3, 4], [1, 2, 3, 4], [0]):
        mode = _HostReads()
        with mode:
            toks, lps = select_tokens(logits[rows], [params[i] for i in rows],
                                      [torch.Generator().manual_seed(i) for i in rows])
        assert mode.reads == ["tolist"]
        assert list(zip(toks, lps)) == [alone[i] for i in rows]
