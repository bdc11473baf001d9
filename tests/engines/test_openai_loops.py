"""The OpenAI-compatible client engine used from several event loops, as the trainer does (one per phase)."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from memrl.engines.base import SamplingParams
from memrl.engines.openai import OpenAIEngine


class _KeepAlive(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # connections stay open, so a client pools and reuses them

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        data = json.dumps({"choices": [{"token_ids": [len(body["prompt"])], "logprobs": {"token_logprobs": [-0.5]},
                                        "finish_reason": "length"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_one_engine_serves_several_event_loops():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _KeepAlive)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        eng = OpenAIEngine(f"http://127.0.0.1:{httpd.server_address[1]}/v1", model="m", retries=0, concurrency=2)

        async def phase(n: int) -> list[list[int]]:
            res = await asyncio.gather(*(eng.generate(list(range(k + 1)), SamplingParams(max_new_tokens=1))
                                         for k in range(n)))
            return [r.token_ids for r in res]

        for _ in range(3):  # each asyncio.run is a new loop; pooled connections of the last one are gone
            assert asyncio.run(phase(4)) == [[1], [2], [3], [4]]
        asyncio.run(eng.close())
    finally:
        httpd.shutdown()
        httpd.server_close()
