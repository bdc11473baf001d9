"""The /v1/chat/completions client: payloads, replies, retries, the key header; against a server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from memrl.engines.base import EngineError, SamplingParams
from memrl.engines.openai import OpenAIEngine
from memrl.engines.openai_chat import chat_payload, parse_chat_reply

Reply = Callable[[dict[str, Any]], "tuple[int, dict[str, Any]] | dict[str, Any]"]


class FakeChatServer:
    """An OpenAI-compatible chat server in a thread: ``reply(body)`` gives the JSON answer (or status, JSON).

    Every request body and its headers are kept in ``requests``/``headers``, in arrival order.
    """

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                body["_path"] = self.path
                server.requests.append(body)
                server.headers.append(dict(self.headers))
                out = server.reply(body)
                status, answer = out if isinstance(out, tuple) else (200, out)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> FakeChatServer:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def completion(message: dict[str, Any], finish: str = "stop", usage: dict[str, int] | None = None) -> dict[str, Any]:
    """A chat-completion body as servers send it."""
    body: dict[str, Any] = {"id": "x", "object": "chat.completion",
                            "choices": [{"index": 0, "message": {"role": "assistant", **message},
                                         "finish_reason": finish}]}
    if usage is not None:
        body["usage"] = usage
    return body


TOOLS = [{"type": "function", "function": {"name": "f", "description": "d",
                                           "parameters": {"type": "object", "properties": {}}}}]


def test_payload_carries_messages_tools_and_sampling():
    msgs = [{"role": "user", "content": "hi"}]
    body = chat_payload("m", msgs, TOOLS, SamplingParams(max_new_tokens=7, temperature=0.5, top_p=0.9, seed=3))
    assert body == {"model": "m", "messages": msgs, "tools": TOOLS, "tool_choice": "auto", "max_tokens": 7,
                    "temperature": 0.5, "top_p": 0.9, "seed": 3}
    greedy = chat_payload("m", msgs, [], SamplingParams(temperature=0.0, top_p=0.5, top_k=5))
    assert greedy["temperature"] == 0.0 and greedy["top_p"] == 1.0
    assert "tools" not in greedy and "tool_choice" not in greedy and "top_k" not in greedy and "seed" not in greedy
    side = chat_payload("m", msgs, [], SamplingParams(max_new_tokens=7), omit=("max_tokens", "top_p"))
    assert side == {"model": "m", "messages": msgs, "temperature": 1.0}
    with pytest.raises(ValueError, match="cannot omit \\['model'\\]"):
        chat_payload("m", msgs, [], SamplingParams(), omit=("model",))
    assert chat_payload("m", msgs, [], SamplingParams(top_k=5))["top_k"] == 5


def test_reply_reads_content_tool_calls_and_usage():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}
    r = parse_chat_reply(completion({"content": None, "tool_calls": [call]}, "tool_calls",
                                    {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}))
    assert r.content is None and r.tool_calls == [call] and r.finish_reason == "tool_calls"
    assert (r.prompt_tokens, r.completion_tokens) == (12, 5)
    r = parse_chat_reply(completion({"content": "done"}, "length"))
    assert (r.content, r.tool_calls, r.finish_reason, r.prompt_tokens) == ("done", [], "length", None)
    with pytest.raises(EngineError, match="choices"):
        parse_chat_reply({"error": "x"})
    with pytest.raises(EngineError, match="message"):
        parse_chat_reply({"choices": [{"text": "x"}]})
    with pytest.raises(EngineError, match="tool_calls is not a list"):
        parse_chat_reply(completion({"content": "", "tool_calls": {"a": 1}}))


def test_engine_chat_posts_to_chat_completions_with_retries_and_key(monkeypatch):
    monkeypatch.setenv("MEMRL_TEST_CHAT_KEY", "sk-secret-123")
    answers = [(503, {"error": "busy"}), completion({"content": "hello"}, usage={"prompt_tokens": 3,
                                                                                 "completion_tokens": 1})]
    with FakeChatServer(lambda body: answers.pop(0)) as srv:
        eng = OpenAIEngine(srv.url, model="served", api_key_env="MEMRL_TEST_CHAT_KEY", retries=2, backoff_s=0.0)

        async def go() -> Any:
            try:
                return await eng.chat([{"role": "user", "content": "hi"}], TOOLS, SamplingParams(max_new_tokens=4))
            finally:
                await eng.close()

        reply = asyncio.run(go())
    assert reply.content == "hello" and reply.completion_tokens == 1
    assert [r["_path"] for r in srv.requests] == ["/v1/chat/completions"] * 2  # the 503 was retried
    assert srv.requests[1]["model"] == "served" and srv.requests[1]["tools"] == TOOLS
    assert srv.headers[1]["Authorization"] == "Bearer sk-secret-123"
    assert "sk-secret" not in repr(eng)


def test_client_errors_are_not_retried():
    with FakeChatServer(lambda body: (400, {"error": {"message": "tools not supported"}})) as srv:
        eng = OpenAIEngine(srv.url, model="m", retries=3, backoff_s=0.0)
        with pytest.raises(EngineError, match="HTTP 400 .*/chat/completions.*tools not supported"):
            asyncio.run(eng.chat([{"role": "user", "content": "hi"}], [], SamplingParams()))
    assert len(srv.requests) == 1
