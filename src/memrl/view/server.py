"""``memrl view DIR`` without ``--out``: the page served on a local port, rebuilt on every load.

Rebuilding per request means a browser refresh shows the steps a running trainer has written
since. The page holds the episode list only; an opened episode is fetched from ``/episode?id=``
and decoded then, so a long run's page loads fast (the tokenizer is loaded once, see
:func:`memrl.view.loader.get_tokenizer`). The server binds to 127.0.0.1 only: the page holds
prompts and model outputs.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from memrl.view.loader import load_episode, load_payload
from memrl.view.page import render_page


def make_handler(path: Path, tokenizer: str | None, steps: str | None = None,
                 last: int | None = None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            url = urlsplit(self.path)
            try:
                if url.path in ("/", "/index.html"):
                    page = render_page(load_payload(path, tokenizer, steps=steps, last=last, lazy=True))
                    self._send(200, "text/html; charset=utf-8", page.encode("utf-8"))
                elif url.path == "/episode":
                    ep_id = (parse_qs(url.query).get("id") or [""])[0]
                    episode = load_episode(path, ep_id, tokenizer)
                    if episode is None:
                        self._send(404, "text/plain; charset=utf-8", f"no episode {ep_id!r}\n".encode())
                    else:
                        self._send(200, "application/json", json.dumps(episode, allow_nan=False,
                                                                       default=str).encode("utf-8"))
                else:
                    self._send(404, "text/plain; charset=utf-8", b"not found\n")
            except Exception:  # show why in the browser and keep serving
                self._send(500, "text/plain; charset=utf-8", traceback.format_exc().encode("utf-8"))

        def _send(self, code: int, ctype: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass  # one line per refresh would bury the URL

    return Handler


def make_server(path: Path, port: int = 0, tokenizer: str | None = None, host: str = "127.0.0.1", *,
                steps: str | None = None, last: int | None = None) -> ThreadingHTTPServer:
    """A bound server (port 0 picks a free one: read it from ``server.server_address``)."""
    server = ThreadingHTTPServer((host, port), make_handler(Path(path), tokenizer, steps, last))
    server.daemon_threads = True
    return server


def serve(path: Path, port: int = 0, tokenizer: str | None = None, *, steps: str | None = None,
          last: int | None = None, announce: Callable[[str], None] = lambda url: print(url, flush=True)) -> None:
    """Serve until interrupted."""
    server = make_server(path, port, tokenizer, steps=steps, last=last)
    host, bound = server.server_address[:2]
    announce(f"http://{host}:{bound}/")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
    finally:
        server.server_close()
