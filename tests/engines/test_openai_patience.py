"""The OpenAI client engine against a slow server: slow is not failed, dead is, retries back off."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from memrl.engines.base import EngineError, SamplingParams
from memrl.engines.openai import OpenAIEngine

REPLY = {"choices": [{"token_ids": [7], "logprobs": {"token_logprobs": [-0.25]}, "finish_reason": "length"}]}


class SlowServer:
    """``/v1/completions`` answers after ``delay`` s (None: never); ``/v1/models`` answers while ``alive``.

    ``statuses`` are answered (with ``Retry-After: retry_after``) before the first real reply.
    """

    def __init__(self, delay: float | None, alive: bool = True, statuses: tuple[int, ...] = (),
                 retry_after: str | None = None) -> None:
        self.delay, self.alive, self.statuses, self.retry_after = delay, alive, list(statuses), retry_after
        self.posts: list[float] = []
        self.probes: list[float] = []
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                for k, v in {"Content-Type": "application/json", "Content-Length": str(len(data)),
                             **(headers or {})}.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                server.probes.append(time.monotonic())
                if not server.alive:
                    server.release.wait(30)  # a hung server: the probe gets no answer
                    return
                self._json(200, {"data": [{"id": "m"}]})

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server.posts.append(time.monotonic())
                if server.statuses:
                    self._json(server.statuses.pop(0), {"error": {"message": "busy"}},
                               {"Retry-After": server.retry_after} if server.retry_after else None)
                    return
                if server.release.wait(server.delay):  # delay None: until the test is over
                    return
                self._json(200, REPLY)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True

    def __enter__(self) -> SlowServer:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


def run(engine: OpenAIEngine, max_tokens: int = 4) -> Any:
    async def go() -> Any:
        try:
            return await engine.generate([1, 2, 3], SamplingParams(max_new_tokens=max_tokens))
        finally:
            await engine.close()
    return asyncio.run(go())


def test_a_slow_answer_of_a_live_server_is_awaited_not_resent():
    with SlowServer(delay=1.2) as srv:
        eng = OpenAIEngine(srv.url, "m", timeout_s=0.2, timeout_per_token_s=0.0, retries=3, backoff_s=0.0)
        res = run(eng)
    assert res.token_ids == [7] and res.logprobs == [-0.25]
    assert len(srv.posts) == 1  # waited on the same request: never re-queued the prompt
    assert len(srv.probes) >= 3  # asked "are you alive?" after each 0.2 s of patience


def test_patience_grows_with_max_tokens_before_the_first_probe():
    eng = OpenAIEngine("http://127.0.0.1:9/v1", "m", timeout_s=0.2, timeout_per_token_s=0.01)
    assert eng.patience({"max_tokens": 50}) == pytest.approx(0.7)
    assert eng.patience({"max_completion_tokens": 10}) == pytest.approx(0.3)
    with SlowServer(delay=1.0) as srv:
        eng = OpenAIEngine(srv.url, "m", timeout_s=0.2, timeout_per_token_s=0.01, retries=0)
        run(eng, max_tokens=50)
    assert srv.probes and srv.probes[0] - srv.posts[0] >= 0.65


def test_a_server_that_stops_answering_fails_the_attempt_and_is_retried():
    with SlowServer(delay=None, alive=False) as srv:
        eng = OpenAIEngine(srv.url, "m", timeout_s=0.2, timeout_per_token_s=0.0, retries=1, backoff_s=0.0,
                           probe_timeout_s=0.2)
        with pytest.raises(EngineError, match="failed after 2 attempts: no answer, and the server stopped"):
            run(eng)
    assert len(srv.posts) == 2


def test_max_wait_caps_a_live_but_endless_request():
    with SlowServer(delay=None) as srv:
        eng = OpenAIEngine(srv.url, "m", timeout_s=0.2, timeout_per_token_s=0.0, retries=0, max_wait_s=0.5)
        t0 = time.monotonic()
        with pytest.raises(EngineError, match="failed after 1 attempts"):
            run(eng)
    assert 0.45 <= time.monotonic() - t0 < 3.0


def test_busy_answers_are_retried_after_retry_after():
    with SlowServer(delay=0.0, statuses=(503, 429), retry_after="0.3") as srv:
        eng = OpenAIEngine(srv.url, "m", retries=2, backoff_s=0.0)
        assert run(eng).token_ids == [7]
    assert len(srv.posts) == 3
    assert srv.posts[1] - srv.posts[0] >= 0.28 and srv.posts[2] - srv.posts[1] >= 0.28


def test_backoff_doubles_with_jitter_and_is_capped():
    eng = OpenAIEngine("http://127.0.0.1:9/v1", "m", backoff_s=1.0, backoff_max_s=5.0)
    assert 1.0 <= eng.backoff(0) <= 1.1 and 4.0 <= eng.backoff(2) <= 4.4
    assert eng.backoff(6) == 5.0 and eng.backoff(0, retry_after="2") == 2.0
    assert eng.backoff(0, retry_after="Wed, 21 Oct 2015 07:28:00 GMT") <= 1.1
