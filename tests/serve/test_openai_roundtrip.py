"""``memrl serve`` + the OpenAI-compatible engine against the in-process HF engine."""

import asyncio
import json
import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from memrl.engines.base import EngineError, SamplingParams
from memrl.engines.hf import HFEngine
from memrl.engines.openai import OpenAIEngine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    env = {**os.environ, "MEMRL_TEST_KEY": "sekrit-123"}
    # Output goes to a file: the server logs one line per request, and an unread pipe would fill and block it.
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "memrl.cli.main", "serve", "--model", "tiny", "--port",
                                 str(port), "--api-key-env", "MEMRL_TEST_KEY"], env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.3)
        if proc.poll() is not None:
            pytest.fail(f"server exited: {log.read_text()}")
    yield url + "/v1"
    proc.terminate()
    proc.wait(timeout=30)
    assert "sekrit" not in log.read_text()


def test_models_and_auth(server):
    r = httpx.get(server + "/models")
    assert r.status_code == 401
    r = httpx.get(server + "/models", headers={"Authorization": "Bearer sekrit-123"})
    assert r.json()["data"][0]["id"] == "tiny"


def test_greedy_ids_and_logprobs_match_in_process(server, tiny_model, monkeypatch):
    model, tok = tiny_model
    monkeypatch.setenv("MEMRL_TEST_KEY", "sekrit-123")
    prompts = [tok.encode(t, add_special_tokens=False) for t in ("hello world", "the key is", "Document 7:")]
    params = SamplingParams(max_new_tokens=10, greedy=True, stop_token_ids=(tok.eos_token_id,))

    async def go():
        remote = OpenAIEngine(server, "tiny", api_key_env="MEMRL_TEST_KEY", concurrency=4)
        local = HFEngine(model)
        a = await asyncio.gather(*[remote.generate(p, params) for p in prompts])
        b = await asyncio.gather(*[local.generate(p, params) for p in prompts])
        assert "sekrit" not in repr(remote)
        await remote.close()
        await local.close()
        return a, b

    remote, local = asyncio.run(go())
    for r, l in zip(remote, local):
        assert r.token_ids == l.token_ids and r.finish_reason == l.finish_reason
        assert r.logprobs == pytest.approx(l.logprobs, abs=1e-4)


def test_text_and_chat_endpoints(server):
    h = {"Authorization": "Bearer sekrit-123"}
    r = httpx.post(server + "/completions", headers=h, json={"model": "tiny", "prompt": "hello", "max_tokens": 5,
                                                             "temperature": 0, "logprobs": 1,
                                                             "return_tokens_as_token_ids": True}).json()
    ch = r["choices"][0]
    assert len(ch["token_ids"]) == len(ch["logprobs"]["token_logprobs"]) <= 5
    assert all(t.startswith("token_id:") for t in ch["logprobs"]["tokens"])
    assert r["usage"]["completion_tokens"] == len(ch["token_ids"])
    r = httpx.post(server + "/chat/completions", headers=h,
                   json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                         "temperature": 0}).json()
    assert r["object"] == "chat.completion" and isinstance(r["choices"][0]["message"]["content"], str)
    bad = httpx.post(server + "/completions", headers=h, json={"prompt": "x", "top_p": 0})
    assert bad.status_code == 400


def test_parse_token_id_strings_without_token_ids():
    choice = {"logprobs": {"tokens": ["token_id:5", "token_id:9"], "token_logprobs": [-0.1, -0.2]},
              "finish_reason": "length"}
    res = OpenAIEngine._parse(choice)
    assert res.token_ids == [5, 9] and res.logprobs == [-0.1, -0.2] and res.finish_reason == "length"
    with pytest.raises(EngineError, match="token_id"):
        OpenAIEngine._parse({"logprobs": {"tokens": ["hi"], "token_logprobs": [0.0]}})


def test_unreachable_server_retries_then_fails():
    async def go():
        eng = OpenAIEngine(f"http://127.0.0.1:{free_port()}/v1", "m", retries=2, backoff_s=0.01, timeout_s=2)
        try:
            await eng.generate([1, 2], SamplingParams(max_new_tokens=2))
        finally:
            await eng.close()

    with pytest.raises(EngineError, match="after 3 attempts"):
        asyncio.run(go())


def test_eval_through_server_gives_same_greedy_answers(server, tmp_path, hotpot_file, monkeypatch):
    from memrl.data import plan_synthesis

    monkeypatch.setenv("OPENAI_API_KEY", "sekrit-123")
    data = tmp_path / "data"
    plan_synthesis(hotpot_file, data, [20], max_samples=3).run()
    common = ["--data", data, "--docs", "20", "--model", "tiny", "workflow.chunk_tokens=1500",
              "workflow.memory_tokens=6", "workflow.final_tokens=6"]
    outs = {}
    for engine in ("hf", "openai"):
        extra = ["--engine", "openai", "--base-url", server] if engine == "openai" else []
        r = subprocess.run([sys.executable, "-m", "memrl.cli.main", "eval", "--out", tmp_path / engine, *extra,
                            *map(str, common)], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        outs[engine] = {p.name: json.loads(p.read_text()) for p in (tmp_path / engine / "episodes" / "20").iterdir()}
    assert outs["hf"].keys() == outs["openai"].keys() and len(outs["hf"]) == 3
    for name, ep in outs["hf"].items():
        other = outs["openai"][name]
        assert ep["info"]["final_text"] == other["info"]["final_text"]
        assert ep["info"]["memory"] == other["info"]["memory"]
        assert ep["metrics"]["num_conversations"] == other["metrics"]["num_conversations"]
