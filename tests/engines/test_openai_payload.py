"""The completions request the ``openai`` engine sends: every field a vLLM server would otherwise fill from the
model's ``generation_config.json`` is given its neutral value, and only the request's own stops apply."""

from __future__ import annotations

from memrl.engines.base import SamplingParams
from memrl.engines.openai import OpenAIEngine


def test_server_defaults_cannot_change_the_sampled_distribution():
    engine = OpenAIEngine("http://127.0.0.1:9/v1", "m")
    body = engine._payload([1, 2], SamplingParams(max_new_tokens=5, temperature=0.6, top_p=0.9, seed=3,
                                                  stop_token_ids=(7,)))
    assert {k: body[k] for k in ("top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
                                 "ignore_eos", "stop_token_ids", "temperature", "top_p", "seed")} == {
        "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
        "ignore_eos": True, "stop_token_ids": [7], "temperature": 0.6, "top_p": 0.9, "seed": 3}
    assert engine._payload([1], SamplingParams(top_k=20, temperature=0.7))["top_k"] == 20
    greedy = engine._payload([1], SamplingParams(greedy=True, top_k=20, top_p=0.5))
    assert (greedy["temperature"], greedy["top_p"], greedy["top_k"]) == (0.0, 1.0, -1)


def test_stop_strings_go_to_the_server_with_how_its_text_is_read():
    engine = OpenAIEngine("http://127.0.0.1:9/v1", "m")
    body = engine._payload([1], SamplingParams(stop=("Observation:",), skip_special_tokens=False))
    assert body["stop"] == ["Observation:"] and body["skip_special_tokens"] is False
    assert "stop" not in engine._payload([1], SamplingParams())
