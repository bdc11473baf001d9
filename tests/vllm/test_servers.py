"""A real vLLM server behind ``--engine openai``, and ``memrl serve --engine vllm``: the HF engine's answers."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("vllm", reason="vLLM not installed: `make test-vllm` runs these with vLLM's CPU build")

from memrl.engines.base import SamplingParams  # noqa: E402
from memrl.engines.hf import HFEngine  # noqa: E402


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(server: subprocess.Popen, port: int) -> None:
    import httpx

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert server.poll() is None, server.communicate()[1][-3000:]
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise AssertionError("the server did not become healthy in 300 s")


def greedy_through_openai_equals_hf(port: int, served: str) -> None:
    from memrl.engines.openai import OpenAIEngine
    from memrl.models.resolve import load_model, load_tokenizer, resolve_model_path

    eng = OpenAIEngine(f"http://127.0.0.1:{port}/v1", model=served)
    hf = HFEngine(load_model(resolve_model_path("tiny32"), "float32", "cpu"))
    prompts = [[5, 6, 7, 8, 9], [100, 20, 30], list(range(40, 90))]
    sp = SamplingParams(max_new_tokens=10, greedy=True)

    async def greedy(e):
        return await asyncio.gather(*(e.generate(p, sp) for p in prompts))

    got, want = asyncio.run(greedy(eng)), asyncio.run(greedy(hf))
    for g, w in zip(got, want):
        assert g.token_ids == w.token_ids
        assert max(abs(a - b) for a, b in zip(g.logprobs, w.logprobs)) < 1e-3
    # a stop string: the server ends at the token completing it, where the HF engine given the tokenizer does
    hf.tokenizer = load_tokenizer("tiny32")
    text = hf.tokenizer.decode(want[2].token_ids[4:7], skip_special_tokens=True).strip()
    assert text, "greedy tokens 4-7 of the tiny model decode to text"
    stopped = sp.with_(stop=(text,))
    got_stop, want_stop = (asyncio.run(e.generate(prompts[2], stopped)) for e in (eng, hf))
    asyncio.run(eng.close())
    assert got_stop.finish_reason == want_stop.finish_reason == "stop"
    assert got_stop.token_ids == want_stop.token_ids and len(got_stop.token_ids) < 10


def stop(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()


@pytest.mark.parametrize("mode", ["raw_logprobs", "processed_logprobs"])
def test_openai_engine_against_a_real_vllm_server(mode):
    """``--engine openai`` on ``vllm.entrypoints.openai.api_server``: the HF engine's greedy answers, and the
    start-up probe tells vLLM's default raw log-probs (refused at temperature 0.6) from processed ones."""
    from memrl.engines.base import EngineError
    from memrl.engines.openai import OpenAIEngine
    from memrl.models.resolve import resolve_model_path

    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    server = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server",
                               "--model", resolve_model_path("tiny32"), "--host", "127.0.0.1", "--port", str(port),
                               "--dtype", "float32", "--max-model-len", "4096", "--enforce-eager",
                               "--served-model-name", "tiny32", "--logprobs-mode", mode],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_healthy(server, port)
        eng = OpenAIEngine(f"http://127.0.0.1:{port}/v1", "tiny32", api_key_env=None)
        if mode == "raw_logprobs":  # vLLM's default
            with pytest.raises(EngineError, match="--logprobs-mode processed_logprobs"):
                eng.check_logprobs(0.6)
            greedy_through_openai_equals_hf(port, "tiny32")
        else:
            assert eng.check_logprobs(0.6) == "temperature-scaled"
            logprob_texts_equal_vllms(port)
    finally:
        stop(server)


def logprob_texts_equal_vllms(port: int) -> None:
    """memrl's log-prob block (tokens, top alternatives, text offsets) for vLLM's own samples is vLLM's, partial
    characters included: "" until the token that finishes one, which carries it whole."""
    import random

    import httpx

    from memrl.engines.base import GenerationResult
    from memrl.models.resolve import load_tokenizer
    from memrl.serve.answers import Answers

    answers, rng, partial = Answers(load_tokenizer("tiny32")), random.Random(0), 0
    for seed in range(12):
        body = {"model": "tiny32", "prompt": [rng.randrange(100, 380) for _ in range(5)], "max_tokens": 12,
                "temperature": 1.0, "seed": seed, "logprobs": 3, "return_token_ids": True}
        got = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=60).json()["choices"][0]
        as_ids = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={**body, "return_tokens_as_token_ids": True},
                            timeout=60).json()["choices"][0]["logprobs"]["top_logprobs"]
        alts = [[(int(k.split(":")[1]), v) for k, v in step.items()] for step in as_ids]
        res = GenerationResult(got["token_ids"], got["logprobs"]["token_logprobs"], "length", {"top_logprobs": alts})
        mine = answers.completion_logprobs(res, 3, False)
        want = got["logprobs"]
        assert (mine["tokens"], mine["text_offset"]) == (want["tokens"], want["text_offset"])
        assert [sorted(step) for step in mine["top_logprobs"]] == [sorted(step) for step in want["top_logprobs"]]
        partial += want["tokens"].count("")
    assert partial, "no sample held part of a character: the comparison did not reach the case it is for"


def test_memrl_serve_with_the_vllm_engine():
    """``memrl serve --engine vllm``: the same answers through memrl's own server, on vLLM."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "memrl.cli.main", "serve", "--model", "tiny32", "--engine",
                               "vllm", "--dtype", "float32", "--port", str(port), "--max-model-len", "4096"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"})
    try:
        wait_healthy(server, port)
        greedy_through_openai_equals_hf(port, "tiny32")
    finally:
        stop(server)
