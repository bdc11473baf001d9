"""A fake OpenAI-compatible server on 127.0.0.1 for the parity scripts: ``reply(body) -> (status, json)``.

Every request body is kept (``requests``, JSON with sorted keys, in arrival order), so a script can
compare what two clients sent.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Callable[[dict[str, Any]], "tuple[int, dict[str, Any]]"]


def comparable(body: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """``fields`` of a chat request, with two LiteLLM artefacts set aside (τ²-bench reaches its models through
    LiteLLM): None-valued message keys (``tool_calls: None``) and the ``name`` it repeats beside ``function``
    in each tool call."""
    out = {k: body[k] for k in fields if k in body}
    out["messages"] = [{k: v for k, v in m.items() if v is not None} for m in body["messages"]]
    for m in out["messages"]:
        for c in m.get("tool_calls", []):
            c.pop("name", None)
    return out


class FakeServer:
    def __init__(self, reply: Reply) -> None:
        self.requests: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(json.dumps(body, sort_keys=True))
                status, answer = reply(body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
