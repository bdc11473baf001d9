"""``memrl serve``'s app in process: validation, limits, error shape, auth, disconnects and draining."""

import asyncio
import io
import json
import re
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from memrl.engines.hf import HFEngine
from memrl.serve.app import create_app
from memrl.serve.limits import ServeLimits

KEY = "sekrit-456"
AUTH = {"Authorization": f"Bearer {KEY}"}
VOCAB = 387  # the tiny model's embedding rows


@pytest.fixture
def make_app(tiny_model):
    model, tok = tiny_model

    def make(**limits):
        lim = ServeLimits.for_model(model, **limits)
        return create_app(HFEngine(model), tok, "tiny", api_key=KEY, limits=lim)

    return make


def post_many(app, bodies, path="/v1/completions"):
    """Send ``bodies`` concurrently through the ASGI app (they share engine batches)."""
    async def go():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=AUTH, timeout=300) as c:
            return await asyncio.gather(*[c.post(path, json=b) for b in bodies])

    return asyncio.run(go())


def error_of(resp):
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and "\n" not in err["message"]
    return err


def test_bad_token_ids_fail_alone_not_their_batch(make_app, tiny_model):
    tok = tiny_model[1]
    good = [{"prompt": tok.encode(t, add_special_tokens=False), "max_tokens": 6, "temperature": 0}
            for t in ("hello world", "the key is", "a", "Document 7:")] * 3
    bad = [{"prompt": [5, VOCAB], "max_tokens": 6}, {"prompt": [5, -1], "max_tokens": 6},
           {"prompt": [[5, 6], [7, 10**6]], "max_tokens": 6}, {"prompt": [5, True]},
           {"prompt": [5, 6.5]}, {"prompt": [5, 6], "stop_token_ids": [VOCAB + 3]},
           {"prompt": [5, 6], "stop_token_ids": [-2]}]
    app = make_app()
    mixed = post_many(app, good[:6] + bad + good[6:])
    alone = post_many(app, good)
    statuses = [r.status_code for r in mixed]
    assert statuses == [200] * 6 + [400] * len(bad) + [200] * 6
    messages = [error_of(r)["message"] for r in mixed[6:6 + len(bad)]]
    assert "prompt[1]: token id 387 is outside the vocabulary (0..386)" in messages[0]
    assert "token id -1" in messages[1] and messages[2].startswith("prompt[1][1]:")
    assert "stop_token_ids[0]" in messages[5] and "stop_token_ids[0]" in messages[6]
    ok = [r.json()["choices"][0]["token_ids"] for r in mixed[:6] + mixed[6 + len(bad):]]
    assert ok == [r.json()["choices"][0]["token_ids"] for r in alone]


def test_fifty_concurrent_requests_succeed(make_app):
    bodies = [{"model": "tiny", "prompt": [5 + i % 7, 9, 11], "max_tokens": 4, "temperature": 1.0, "seed": i}
              for i in range(50)]
    responses = post_many(make_app(), bodies)
    assert [r.status_code for r in responses] == [200] * 50
    for r in responses:
        (choice,) = r.json()["choices"]
        assert 1 <= len(choice["token_ids"]) <= 4 and len(choice["logprobs"] or [None]) >= 1


@pytest.mark.parametrize("body,status,field", [
    ({"prompt": [5, 6], "max_tokens": 1e9}, 400, "context length"),
    ({"prompt": [5] * 60, "max_tokens": 5}, 400, "maximum context length is 64"),
    ({"prompt": "hello", "n": 10**6}, 400, "n: must be between 1 and 4"),
    ({"prompt": "hello", "n": 0}, 400, "n: "),
    ({"prompt": "hello", "max_tokens": -1}, 400, "max_tokens: must be >= 1"),
    ({"prompt": "hello", "max_tokens": 0}, 400, "max_tokens: must be >= 1"),
    ({"prompt": "hello", "temperature": -0.5}, 400, "temperature"),
    ({"prompt": "hello", "top_p": 0}, 400, "top_p"),
    ({"prompt": "hello", "top_p": 1.5}, 400, "top_p"),
    ({"prompt": "hello", "top_k": -2}, 400, "top_k"),
    ({"prompt": "hello", "seed": 2**70}, 400, "seed"),
    ({"prompt": "hello", "stream_options": {"include_usage": True}}, 400, "stream_options: only with stream: true"),
    ({"prompt": []}, 400, "prompt"),
    ({"prompt": ""}, 400, "prompt: must not be empty"),
    ({"prompt": [[5], []]}, 400, "prompt[1]: must not be empty"),
    ({"prompt": "hello", "max_tokens": "lots"}, 400, "max_tokens: "),
    ({"prompt": "hello", "temperature": [1]}, 400, "temperature: "),
    ({}, 400, "prompt: Field required"),
    ({"prompt": "hello", "model": "gpt-9"}, 404, "gpt-9"),
])
def test_requests_beyond_the_limits_get_one_line_errors(make_app, body, status, field):
    with TestClient(make_app(max_model_len=64, max_n=4)) as client:
        r = client.post("/v1/completions", headers=AUTH, json=body)
        assert r.status_code == status, r.text
        assert field in error_of(r)["message"]
        assert client.post("/v1/completions", headers=AUTH, json={"prompt": [5, 6], "max_tokens": 3}).status_code == 200


def test_error_shapes_for_model_routes_and_bodies(make_app):
    with TestClient(make_app(max_body_bytes=2048)) as client:
        r = client.post("/v1/completions", headers=AUTH, json={"prompt": "x", "model": "nope"})
        assert r.status_code == 404 and error_of(r)["code"] == "model_not_found"
        r = client.post("/v1/completions", headers={**AUTH, "content-type": "application/json"}, content=b"{not json")
        assert r.status_code == 400 and error_of(r)["message"] == "request body is not valid JSON"
        r = client.post("/v1/completions", headers=AUTH, json={"prompt": [5] * 2000})
        assert r.status_code == 413 and error_of(r)["code"] == "request_too_large"
        r = client.get("/v1/nowhere", headers=AUTH)
        assert r.status_code == 404 and error_of(r)["type"] == "not_found_error"
        r = client.post("/v1/chat/completions", headers=AUTH, json={"messages": [], "max_tokens": 2})
        assert r.status_code == 400 and "messages" in error_of(r)["message"]
        r = client.post("/v1/chat/completions", headers=AUTH, json={
            "messages": [{"role": "user", "content": "hi"}], "stream": True, "stream_options": {"chunk": 1}})
        assert r.status_code == 400 and error_of(r)["param"] == "stream_options"  # refused before any event


def test_tiny_temperature_is_greedy_not_a_server_error(make_app):
    with TestClient(make_app()) as client:
        greedy = client.post("/v1/completions", headers=AUTH, json={"prompt": [5, 6], "max_tokens": 5,
                                                                     "temperature": 0})
        tiny = client.post("/v1/completions", headers=AUTH, json={"prompt": [5, 6], "max_tokens": 5,
                                                                   "temperature": 1e-45})
        assert tiny.status_code == 200
        assert tiny.json()["choices"][0]["token_ids"] == greedy.json()["choices"][0]["token_ids"]


def test_auth_covers_v1_and_docs_but_not_health(make_app, tiny_model):
    with TestClient(make_app()) as client:
        for path in ("/v1/models",):
            r = client.get(path)
            assert r.status_code == 401 and error_of(r)["code"] == "invalid_api_key"
            assert client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        r = client.post("/v1/completions", json={"prompt": [5, VOCAB]})  # auth is checked before the body
        assert r.status_code == 401 and KEY not in r.text
        assert client.get("/health").json() == {"status": "ok"}
        for path in ("/docs", "/redoc", "/openapi.json"):
            assert client.get(path).status_code == 404 and client.get(path, headers=AUTH).status_code == 404
        card = client.get("/v1/models", headers=AUTH).json()["data"][0]
        assert card["max_model_len"] == 131072 and card["object"] == "model"
        assert isinstance(card["created"], int) and abs(card["created"] - time.time()) < 600  # OpenAI's Model has it
    model, tok = tiny_model
    with TestClient(create_app(HFEngine(model), tok, "tiny")) as open_client:  # no key: docs are on
        assert open_client.get("/openapi.json").status_code == 200
        assert open_client.get("/v1/models").status_code == 200


def test_access_log_has_one_line_per_request_and_no_secrets(tiny_model):
    model, tok = tiny_model
    log = io.StringIO()
    app = create_app(HFEngine(model), tok, "tiny", api_key=KEY, access_log=log)
    with TestClient(app) as client:
        assert client.post("/v1/completions", headers=AUTH,
                           json={"prompt": "my private prompt", "max_tokens": 2}).status_code == 200
        assert client.get("/v1/models?api_key=leak").status_code == 401
        assert client.get("/health").status_code == 200
    lines = log.getvalue().splitlines()
    assert len(lines) == 3
    assert re.fullmatch(r"POST /v1/completions 200 \d+\.\dms", lines[0])
    assert re.fullmatch(r"GET /v1/models 401 \d+\.\dms", lines[1])
    assert not any(s in log.getvalue() for s in (KEY, "private", "leak", "Bearer"))


async def _call(app, body, *, gone_when):
    """Drive the ASGI app by hand: the client 'disconnects' once ``gone_when()`` is true."""
    sent = []
    first = True

    async def receive():
        nonlocal first
        if first:
            first = False
            return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}
        while not gone_when():
            await asyncio.sleep(0.01)
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/v1/completions", "raw_path": b"/v1/completions", "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/json"), (b"authorization", f"Bearer {KEY}".encode())],
             "client": ("127.0.0.1", 5), "server": ("127.0.0.1", 80)}
    await asyncio.wait_for(app(scope, receive, send), 300)
    return sent[0]["status"] if sent else None


@pytest.mark.parametrize("how", ["disconnect", "shutdown"])
def test_generation_stops_when_the_client_leaves_or_the_server_drains(tiny_model, how):
    """A 100K-token generation is cancelled soon after its client leaves (499) or SIGTERM marks a drain (503)."""
    model, tok = tiny_model
    engine = HFEngine(model)
    app = create_app(engine, tok, "tiny", api_key=KEY, poll_s=0.02)
    body = {"prompt": [5, 6, 7], "max_tokens": 100_000, "temperature": 0, "ignore_eos": True}
    started = lambda: engine.stats.generated_tokens > 0  # noqa: E731

    async def go():
        if how == "disconnect":
            status = await _call(app, body, gone_when=started)
        else:
            async def drain_once_started():
                while not started():
                    await asyncio.sleep(0.01)
                app.state.draining = True

            status, _ = await asyncio.gather(_call(app, body, gone_when=lambda: False), drain_once_started())
        await engine.idle()  # the batch ends once the cancelled row is dropped
        await engine.close()
        return status

    status = asyncio.run(go())
    assert status == (499 if how == "disconnect" else 503)
    assert 0 < engine.stats.generated_tokens < 50_000


def test_a_keyless_local_server_answers_only_requests_addressed_to_this_machine(tiny_model):
    """DNS rebinding: a page at attacker.example rebinds its name to 127.0.0.1 and reads the model's answers."""
    from memrl.serve.middleware import host_name

    assert [host_name(h) for h in ("[::1]:8000", "LocalHost:80", "127.0.0.1", "::1")] == \
        ["::1", "localhost", "127.0.0.1", "::1"]
    model, tok = tiny_model
    app = create_app(HFEngine(model), tok, "tiny", local_hosts=["127.0.0.1", "localhost", "[::1]"])
    with TestClient(app) as client:
        body = {"model": "tiny", "prompt": "hi", "max_tokens": 2}
        for host in ("127.0.0.1:8000", "localhost:8000", "[::1]:8000"):
            assert client.post("/v1/completions", json=body, headers={"Host": host}).status_code == 200
        refused = client.post("/v1/completions", json=body, headers={"Host": "attacker.example:8000"})
        assert refused.status_code == 403 and error_of(refused)["code"] == "host_refused"
        assert client.get("/docs", headers={"Host": "attacker.example:8000"}).status_code == 403
