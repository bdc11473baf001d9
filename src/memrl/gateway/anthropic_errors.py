"""Errors of the Messages routes in Anthropic's shape: ``{"type": "error", "error": {"type", "message"}}``.

Every other error of the gateway is OpenAI's ``{"error": {"message", "type", "param", "code"}}``
(:mod:`memrl.serve.errors`), and so were these: the ``anthropic`` SDK picks its exception class by
status alone, but a program that reads ``err.body["type"]`` or matches Anthropic's error types
(``authentication_error``, ``request_too_large``, ...) saw something no Anthropic endpoint sends. This
middleware sits outside everything else, so the body-size limit, routing errors, body validation and
the gateway's own checks are all rewritten alike; successful answers and streams pass untouched. An
exception nothing handled is answered here too (a 503, as :func:`unexpected_message` words it for the
other routes), because Starlette's last-resort handler sits outside every middleware.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Anthropic's error types by status (https://docs.anthropic.com/en/api/errors); others are api_error
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 405: "invalid_request_error", 410: "invalid_request_error",
          413: "request_too_large", 429: "rate_limit_error", 499: "invalid_request_error",
          504: "timeout_error", 529: "overloaded_error"}


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": _TYPES.get(status, "api_error"), "message": message}}


def unexpected_message(exc: BaseException) -> str:
    """What the gateway answers (503) for an exception nothing else handled: its class, never its text."""
    return f"the gateway could not answer ({type(exc).__name__})"


async def _send_json(send: Send, status: int, data: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


def _message(body: bytes) -> str:
    """The message of an OpenAI-shaped error body (or the body itself, when it is not one)."""
    try:
        data = json.loads(body)
        return str(data["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return body.decode("utf-8", "replace")[:500]


class AnthropicErrors:
    """Rewrite error answers of ``/messages`` and ``/messages/count_tokens`` into Anthropic's error shape."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].rstrip("/").endswith(("/messages", "/messages/count_tokens")):
            await self.app(scope, receive, send)
            return
        start: dict[str, Any] = {}
        body = bytearray()

        async def rewrite(message: Message) -> None:
            if message["type"] == "http.response.start":
                if message["status"] < 400:
                    start["pass"] = True
                    await send(message)
                    return
                start.update(message)
                return
            if start.get("pass") or message["type"] != "http.response.body":
                await send(message)
                return
            body.extend(message.get("body", b""))
            if message.get("more_body"):
                return
            data = json.dumps(anthropic_error(start["status"], _message(bytes(body)))).encode()
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() not in (b"content-length",
                                                                                        b"content-type")]
            start["sent"] = True
            await _send_json(send, start["status"], data, headers)

        try:
            await self.app(scope, receive, rewrite)
        except Exception as exc:
            if not (start.get("pass") or start.get("sent")):
                await _send_json(send, 503, json.dumps(anthropic_error(503, unexpected_message(exc))).encode(),
                                 [(b"x-should-retry", b"false")])  # the same request would fail the same way
            raise  # Starlette's outer handler logs it; the answer has started, so it sends nothing more
