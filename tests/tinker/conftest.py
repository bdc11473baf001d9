"""A ``memrl tinker`` server in this process (uvicorn in a thread) and ``tinker`` SDK clients for it.

The server loads the ``tiny`` model once per test session; each test gets a ``ServiceClient`` of its
own session. The SDK runs its own event loop in a background thread, so the server's loop and the
client's never share a thread.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

KEY = "tml-test-key-123"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Running:
    """A server started in a thread; ``stop()`` shuts it down as Ctrl-C would (graceful)."""

    def __init__(self, state_dir: Path, *, limits: dict[str, int] | None = None, poll_s: float = 5.0) -> None:
        import uvicorn

        from memrl.tinker.app import create_app
        from memrl.tinker.server import build_service

        self.svc = build_service("tiny", state_dir, device="cpu", limits=limits, poll_s=poll_s)
        self.app = create_app(self.svc, KEY, grace_s=10.0)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                                timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.server.install_signal_handlers = lambda: None  # not the main thread
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the tinker test server did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.app.state.draining = True
        self.server.should_exit = True
        self.thread.join(timeout=30)


# Small limits, so that the limit tests need no second server: a 1 MB body, 8 datums a request, 4 samples.
LIMITS = {"max_body_bytes": 2**20, "max_datums": 8, "max_num_samples": 4}


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    pytest.importorskip("tinker")
    running = Running(tmp_path_factory.mktemp("tinker-state"), limits=LIMITS, poll_s=2.0)
    yield running
    running.stop()


def service_client(url: str, key: str = KEY) -> Any:
    import tinker

    os.environ.setdefault("TINKER_TELEMETRY", "0")
    return tinker.ServiceClient(base_url=url, api_key=key)


@pytest.fixture
def client(server: Running) -> Iterator[Any]:
    sc = service_client(server.url)
    yield sc
    sc.close("success").result(timeout=30)


def base_model(server: Running) -> str:
    return server.svc.base_name
