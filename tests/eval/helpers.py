"""Small eval fixtures: needle-task eval files, a tokenizer folder, and a fake OpenAI-compatible server."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from memrl.data import write_samples
from memrl_demo.needle import make_split, tokenizer_corpus
from memrl.models.tiny import build_hf_tokenizer


def needle_eval_dir(root: Path, n: int = 3, count: int = 4) -> Path:
    """``root/eval_{n}.jsonl`` with ``count`` short needle documents (one chunk each by default)."""
    write_samples(make_split(5, count, (1, 2)), root / f"eval_{n}.jsonl", fmt="jsonl")
    return root


def tokenizer_dir(root: Path) -> Path:
    build_hf_tokenizer(tokenizer_corpus(), 600).save_pretrained(root)
    return root


class FakeServer:
    """``/v1/completions`` that answers 401, answers ``[0]`` at once, or holds requests until released.

    ``mode``: ``"unauthorized"`` | ``"ok"``; ``hold_after`` (with ``ok``): requests past that
    many wait on ``release`` (a ``threading.Event``) before answering.
    """

    def __init__(self, mode: str = "ok", hold_after: int | None = None) -> None:
        self.mode = mode
        self.hold_after = hold_after
        self.release = threading.Event()
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server.requests += 1
                if server.mode == "unauthorized":
                    self._reply(401, {"error": {"message": "Incorrect API key provided"}})
                    return
                if server.hold_after is not None and server.requests > server.hold_after:
                    server.release.wait(120)
                self._reply(200, {"choices": [{"token_ids": [0], "logprobs": {"token_logprobs": [-0.1]},
                                               "finish_reason": "stop"}]})

            def _reply(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
