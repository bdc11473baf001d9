"""On-policy distillation's signal: hand-checked values, and tinker-cookbook's own function on fixed tensors.

The parity test runs ``incorporate_kl_penalty`` (tinker_cookbook/distillation/train_on_policy.py) and
``discounted_future_sum_vectorized`` (tinker_cookbook/rl/metrics.py) from a tinker-cookbook checkout named
by ``MEMRL_TINKER_REPO``: the two functions are taken out of the files with ``ast`` and run against
stand-ins for tinker's ``Datum``/``TensorData``/sampling client (nothing of tinker-cookbook is copied here).
"""

from __future__ import annotations

import ast
import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from memrl.rl import discounted_future_sum, distill_advantages, reverse_kl

STUDENT = torch.tensor([[-1.0, -2.0, -0.5, 0.0]])
TEACHER = torch.tensor([[-1.5, -1.0, -0.5, -3.0]])
MASK = torch.tensor([[0.0, 1.0, 1.0, 1.0]])  # position 0 is the prompt's


def test_advantage_is_the_negative_reverse_kl_on_response_tokens():
    # log p - log q = [0.5, -1, 0, 3]; the prompt position gets nothing
    assert distill_advantages(STUDENT, TEACHER, MASK).tolist() == [[0.0, 1.0, 0.0, -3.0]]
    assert distill_advantages(STUDENT, TEACHER, MASK, coef=0.5).tolist() == [[0.0, 0.5, 0.0, -1.5]]


def test_discounted_signal_sums_later_tokens():
    # [0, 1, 0, -3] summed backwards with gamma 0.5: t3 -3, t2 -1.5, t1 1 - 0.75 = 0.25, t0 (prompt) masked
    assert distill_advantages(STUDENT, TEACHER, MASK, discount=0.5).tolist() == [[0.0, 0.25, -1.5, -3.0]]
    assert discounted_future_sum(torch.tensor([1.0, 2.0, 4.0]), 0.5).tolist() == [3.0, 4.0, 4.0]


def test_reverse_kl_is_the_mean_over_response_tokens():
    assert reverse_kl(STUDENT, TEACHER, MASK) == pytest.approx((-1.0 + 0.0 + 3.0) / 3)
    assert reverse_kl(STUDENT, TEACHER, torch.zeros_like(MASK)) == 0.0


def test_equal_models_give_no_signal():
    assert not distill_advantages(STUDENT, STUDENT, MASK, discount=0.9).any()


TINKER = os.environ.get("MEMRL_TINKER_REPO")


def _function(path: Path, name: str) -> str:
    """The source of the top-level function ``name`` in ``path``, without its decorators."""
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name)
    node.decorator_list = []
    return ast.unparse(node)


class _TensorData:
    def __init__(self, t: torch.Tensor) -> None:
        self.t = t
        self.data = t.tolist()

    @classmethod
    def from_torch(cls, t: torch.Tensor) -> "_TensorData":
        return cls(t)

    def to_torch(self) -> torch.Tensor:
        return self.t


class _ModelInput:
    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens

    def append_int(self, token: int) -> "_ModelInput":
        return _ModelInput([*self.tokens, token])


class _Datum:
    def __init__(self, tokens: list[int], sampled: torch.Tensor, mask: torch.Tensor) -> None:
        self.model_input = _ModelInput(tokens[:-1])
        self.loss_fn_inputs = {"target_tokens": _TensorData(torch.tensor(tokens[1:])),
                               "logprobs": _TensorData(sampled), "mask": _TensorData(mask),
                               "advantages": _TensorData(torch.zeros_like(sampled))}


class _Teacher:
    """A sampling client whose prompt log-probs are fixed: ``[None, lp(token 1), ..., lp(token L-1)]``."""

    def __init__(self, by_length: dict[int, torch.Tensor]) -> None:
        self.by_length = by_length

    async def compute_logprobs_async(self, seq: _ModelInput) -> list[Any]:
        return [None, *self.by_length[len(seq.tokens)].tolist()]


def _tinker_namespace(repo: Path) -> dict[str, Any]:
    import types

    tinker = types.SimpleNamespace(Datum=_Datum, TensorData=_TensorData, SamplingClient=_Teacher)
    ns: dict[str, Any] = {"torch": torch, "tinker": tinker, "asyncio": asyncio, "cast": lambda _t, v: v, "Any": Any,
                          "safezip": lambda *xs: zip(*xs, strict=True)}
    exec(_function(repo / "tinker_cookbook/rl/metrics.py", "discounted_future_sum_vectorized"), ns)
    exec(_function(repo / "tinker_cookbook/distillation/train_on_policy.py", "incorporate_kl_penalty"), ns)
    return ns


@pytest.mark.skipif(not TINKER, reason="set MEMRL_TINKER_REPO to a tinker-cookbook checkout to compare with it")
@pytest.mark.parametrize(("coef", "discount"), [(1.0, 0.0), (0.7, 0.0), (1.0, 0.9), (0.3, 0.5)])
def test_equals_tinker_incorporate_kl_penalty(coef, discount):
    ns = _tinker_namespace(Path(TINKER))
    gen = torch.Generator().manual_seed(0)
    lengths, datums, teachers, rows = [7, 12, 9], [], {}, []
    for n in lengths:  # rows of different lengths; a prompt, then response tokens with a masked gap (a tool turn)
        sampled = -torch.rand(n - 1, generator=gen) * 3
        teacher = -torch.rand(n - 1, generator=gen) * 3
        mask = torch.ones(n - 1)
        mask[:2] = 0
        mask[n // 2] = 0
        datums.append(_Datum(list(range(n)), sampled, mask))
        teachers[n] = teacher
        rows.append((sampled, teacher, mask))
    metrics = asyncio.run(ns["incorporate_kl_penalty"](datums, [_Teacher(teachers)] * len(datums), [0] * len(datums),
                                                       coef, discount))
    for datum, (sampled, teacher, mask) in zip(datums, rows):
        theirs = datum.loss_fn_inputs["advantages"].to_torch()
        ours = distill_advantages(sampled, teacher, mask, coef=coef, discount=discount)
        # tinker leaves the discounted sum on prompt positions too; memrl's loss reads response tokens only
        assert torch.allclose(ours, theirs * mask, atol=1e-6)
        assert not ours[mask == 0].any()
    width = max(lengths) - 1
    pad = lambda t: torch.nn.functional.pad(t, (0, width - t.numel()))  # noqa: E731
    batch = [torch.stack([pad(r[k]) for r in rows]) for k in range(3)]
    assert reverse_kl(*batch) == pytest.approx(metrics["teacher_kl"], abs=1e-6)
