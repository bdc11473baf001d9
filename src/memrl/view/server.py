"""``memrl view DIR`` without ``--out``: the page served on a local port, rebuilt on every load.

Rebuilding per request means a browser refresh shows the steps a running trainer has written
since. The page holds the episode list only; an opened episode is fetched from ``/episode?id=``
and decoded then, and a text search asks ``/search?q=``, so a long run's page loads fast (the
tokenizer is loaded once, see :func:`memrl.view.loader.get_tokenizer`).

The page holds prompts and model outputs, so the server binds to 127.0.0.1 only and answers only
requests addressed to it by name (``Host: 127.0.0.1:PORT`` or ``localhost:PORT``): a web page
that re-points its own domain at 127.0.0.1 (DNS rebinding) sends its own name as the Host and
is refused. A request that fails gets a short message; the traceback, which names local paths,
goes to the console the server runs in.
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
from memrl.view.page import json_safe, render_page
from memrl.view.search import MAX_QUERY, search_episodes

TEXT = "text/plain; charset=utf-8"


def allowed_hosts(port: int) -> set[str]:
    """The Host header values of a request addressed to this server (a browser omits :80)."""
    names = {f"127.0.0.1:{port}", f"localhost:{port}"}
    return names | ({"127.0.0.1", "localhost"} if port == 80 else set())


def make_handler(path: Path, tokenizer: str | None, steps: str | None = None,
                 last: int | None = None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            hosts = self.headers.get_all("Host") or []
            if len(hosts) != 1 or hosts[0].strip().lower() not in allowed_hosts(self.server.server_address[1]):
                self._send(403, TEXT, b"memrl view answers only requests to 127.0.0.1 or localhost "
                           b"with its port (Host header refused)\n")
                return
            try:
                self._route()
            except Exception:  # keep serving; the details stay on this machine's console
                print(f"memrl view: error serving {self.path[:200]!r}:\n{traceback.format_exc()}",
                      file=sys.stderr, flush=True)
                self._send(500, TEXT, b"internal error while building this response; the memrl view console "
                           b"has the details\n")

        def _route(self) -> None:
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            if url.path in ("/", "/index.html"):
                page = render_page(load_payload(path, tokenizer, steps=steps, last=last, lazy=True))
                self._send(200, "text/html; charset=utf-8", page.encode("utf-8"))
            elif url.path == "/episode":
                ep_id = (query.get("id") or [""])[0]
                episode = load_episode(path, ep_id, tokenizer)
                if episode is None:
                    self._send(404, TEXT, b"no such episode\n")
                else:
                    self._json(episode)
            elif url.path == "/search":
                q = (query.get("q") or [""])[0]
                if not q.strip() or len(q) > MAX_QUERY:
                    self._send(400, TEXT, f"q: give 1 to {MAX_QUERY} characters to search for\n".encode())
                else:
                    self._json({"q": q, "ids": search_episodes(path, q, tokenizer, steps=steps, last=last)})
            else:
                self._send(404, TEXT, b"not found\n")

        def _json(self, value: object) -> None:
            body = json.dumps(json_safe(value), allow_nan=False, default=str).encode("utf-8")
            self._send(200, "application/json", body)

        def _send(self, code: int, ctype: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass  # one line per refresh would bury the URL

    return Handler


def make_server(path: Path, port: int = 0, tokenizer: str | None = None, host: str = "127.0.0.1", *,
                steps: str | None = None, last: int | None = None) -> ThreadingHTTPServer:
    """A bound server (port 0 picks a free one: read it from ``server.server_address``).

    A port outside 0-65535 or one already taken is a one-line :class:`ValueError`.
    """
    if not 0 <= port <= 65535:
        raise ValueError(f"--port {port}: a port is 0-65535 (0 picks a free one)")
    try:
        server = ThreadingHTTPServer((host, port), make_handler(Path(path), tokenizer, steps, last))
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise ValueError(f"--port {port}: cannot listen on {host}:{port} ({why[:1].lower() + why[1:]}); "
                         "pick another port, or leave --port out for a free one") from None
    server.daemon_threads = True
    return server


def serve(server: ThreadingHTTPServer, announce: Callable[[str], None] = lambda url: print(url, flush=True)) -> None:
    """Serve a :func:`make_server` server until interrupted."""
    host, bound = server.server_address[:2]
    announce(f"http://{host}:{bound}/")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
    finally:
        server.server_close()
