"""ASGI middleware of ``memrl serve``: a request-body cap and a one-line access log.

Both are plain ASGI (not Starlette's ``BaseHTTPMiddleware``) so the app keeps
its own ``receive``: the handlers poll it for ``http.disconnect`` to cancel the
generation of a client that went away.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, TextIO

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

DRAIN_BYTES = 256 * 2**20  # past this an oversized body is cut off (connection closed) rather than read to its end


async def _send_json(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": data})


class BodyLimit:
    """Read the whole body first and answer 413 past ``max_bytes`` (checked before any parsing).

    A declared ``content-length`` over the cap is refused without reading; a chunked body is
    read up to the cap. The app then receives the body as one message, and later ``receive``
    calls go to the server (that is where ``http.disconnect`` arrives).
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._drain(receive, 0)
            await self._too_large(send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # gone before the body arrived: nothing to answer
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                if message.get("more_body", False):
                    await self._drain(receive, size)
                await self._too_large(send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _drain(self, receive: Receive, size: int) -> None:
        """Read and drop the rest of the body (up to DRAIN_BYTES) before answering: a server that answers while
        the client is still sending closes the connection under it, and the client sees a connection error
        instead of the 413."""
        while size <= DRAIN_BYTES:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            size += len(message.get("body", b""))
            if not message.get("more_body", False):
                return

    async def _too_large(self, send: Send) -> None:
        mb = self.max_bytes / 2**20
        await _send_json(send, 413, {"error": {
            "message": f"request body is larger than {mb:g} MB (--max-body-mb)",
            "type": "invalid_request_error", "param": None, "code": "request_too_large"}})


class AccessLog:
    """One line per request on ``stream``: method, path, status, milliseconds.

    Nothing else: no query string, headers (the API key travels in one), or body.
    A request whose client left before an answer is logged with status 499.
    """

    def __init__(self, app: ASGIApp, stream: TextIO | None = None) -> None:
        self.app = app
        self.stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 499

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        except Exception:  # an unhandled error; a cancelled task keeps 499
            status = 500 if status == 499 else status
            raise
        finally:
            ms = (time.perf_counter() - start) * 1000
            stream = self.stream or sys.stderr
            print(f"{scope.get('method', '-')} {scope.get('path', '-')} {status} {ms:.1f}ms", file=stream, flush=True)


def host_name(header: str) -> str:
    """The name part of a Host header (``[::1]:8000`` -> ``::1``, ``localhost:80`` -> ``localhost``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class LocalHostOnly:
    """Answer only requests whose Host names this machine (403 otherwise): a keyless server on loopback is
    reachable from any web page whose name rebinds to 127.0.0.1, which then reads the model's answers."""

    def __init__(self, app: ASGIApp, names: list[str]) -> None:
        self.app = app
        self.names = {n.strip("[]").lower() for n in names}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            hosts = [v.decode("latin-1") for k, v in scope.get("headers") or [] if k == b"host"]
            if len(hosts) != 1 or host_name(hosts[0]) not in self.names:
                await _send_json(send, 403, {"error": {
                    "message": "this server answers only requests addressed to 127.0.0.1 or localhost (Host header "
                               "refused); serve with --api-key-env to be reached under another name",
                    "type": "invalid_request_error", "param": None, "code": "host_refused"}})
                return
        await self.app(scope, receive, send)
