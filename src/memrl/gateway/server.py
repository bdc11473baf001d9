"""The gateway server: uvicorn on 127.0.0.1 (a free port) in a thread of the training process.

It lives for the whole run (``Workflow.build_services``), while episodes come and go on
whatever event loops run them (one per rollout round, or an asynchronous producer's):
:meth:`Gateway.episode` opens an episode for the duration of a ``with`` block and gives it
its base URL and key; the HTTP thread hands each call to the episode's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memrl.gateway.sessions import CallSettings, Session, Sessions

HOST = "127.0.0.1"


@dataclass(frozen=True)
class Endpoint:
    """Where one episode's program sends its calls."""

    base_url: str  # http://127.0.0.1:PORT/episodes/<id>/v1
    api_key: str
    session: Session


class Gateway:
    """An OpenAI-compatible endpoint per open episode, served from a background thread."""

    def __init__(self, model_name: str = "policy", *, max_body_mb: float = 8.0, start_timeout_s: float = 30.0,
                 host: str = HOST, port: int = 0, online: Any = None) -> None:
        """``online``: an :class:`~memrl.gateway.online.OnlineEpisodes` to serve ``/rl/*`` for (then ``host`` and
        ``port`` are where external agents reach it; 0: a free port)."""
        import uvicorn

        from memrl.gateway.app import create_gateway_app

        self.address_file: Path | None = None  # RUN/online.json: where agents find the endpoint, removed at close
        from memrl.serve.server import bind_socket

        self.model_name = model_name
        self.sessions = Sessions()
        self.online = online
        self._sock = bind_socket(host, port)
        self.host = host
        self.port = int(self._sock.getsockname()[1])
        app = create_gateway_app(self.sessions, model_name, max_body_bytes=int(max_body_mb * 2**20), online=online)
        config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=1,
                                lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, name="memrl-gateway", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + start_timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the agent gateway did not start on {host}:{self.port}")
            time.sleep(0.01)

    def _serve(self) -> None:
        asyncio.run(self._server.serve(sockets=[self._sock]))

    @property
    def url(self) -> str:
        """Where this process reaches the gateway (a wildcard bind is reached on the loopback address)."""
        host = HOST if self.host in ("0.0.0.0", "") else "[::1]" if self.host == "::" else self.host
        return f"http://{host}:{self.port}"

    @contextlib.contextmanager
    def episode(self, episode: Any, settings: CallSettings | None = None) -> Iterator[Endpoint]:
        """Open ``episode`` (from inside its running event loop) until the block ends."""
        session = self.sessions.open(episode, asyncio.get_running_loop(), settings or CallSettings())
        try:
            yield Endpoint(f"{self.url}/episodes/{session.id}/v1", session.key, session)
        finally:
            self.sessions.close(session)

    def close(self) -> None:
        """Stop serving (open episodes' calls get no answer); safe to call twice."""
        self._server.should_exit = True
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self._sock.close()
        if self.address_file is not None:  # a script looking for the endpoint must not find a dead port
            self.address_file.unlink(missing_ok=True)

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
