"""Which samplers a long run keeps: the least recently used with weights go, base-model samplers never.

An audit's RL loop made a KL-reference sampler once and a snapshot every step; dropping by creation
order lost the reference at step ~256 and the run ended on a 404.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from memrl.serve.errors import APIError
from memrl.tinker import samplers as sm


def _svc() -> SimpleNamespace:
    forgotten: list[str] = []
    return SimpleNamespace(samplers={}, sessions={}, host=SimpleNamespace(forget_sampler=forgotten.append),
                           forgotten=forgotten)


def _snapshot(sid: str) -> sm.Sampler:
    return sm.Sampler(sid, "s", None, None, {"w": torch.zeros(1)})


def test_a_sampler_used_every_step_outlives_many_newer_snapshots(monkeypatch):
    monkeypatch.setattr(sm, "MAX_SAMPLERS", 3)
    svc = _svc()
    sm.add_sampler(svc, sm.Sampler("base", "s", None, None, None))  # a reference on the base model: no weights
    sm.add_sampler(svc, _snapshot("teacher"))  # made once, sampled every step
    for step in range(10):
        sm.add_sampler(svc, _snapshot(f"policy-{step}"))
        assert sm.sampler(svc, "teacher").sampler_id == "teacher"
        assert sm.sampler(svc, "base").weights is None
    assert sorted(svc.samplers) == ["base", "policy-8", "policy-9", "teacher"]
    assert svc.forgotten == [f"policy-{i}" for i in range(8)]  # the host's adapters of the dropped ones go too
    with pytest.raises(APIError) as gone:
        sm.sampler(svc, "policy-0")
    assert gone.value.status == 404 and "least recently used" in gone.value.message


def test_base_model_samplers_are_never_dropped(monkeypatch):
    monkeypatch.setattr(sm, "MAX_SAMPLERS", 2)
    svc = _svc()
    for i in range(5):
        sm.add_sampler(svc, sm.Sampler(f"base-{i}", "s", None, None, None))
        sm.add_sampler(svc, _snapshot(f"snap-{i}"))
    assert sorted(svc.samplers) == [f"base-{i}" for i in range(5)] + ["snap-3", "snap-4"]
