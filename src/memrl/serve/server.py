"""Run the app under uvicorn: flag checks, the listening socket, and shutdown on SIGTERM.

Everything a user can get wrong (port range, a port in use, an unset key
variable) is checked before the model loads, as a ``ValueError`` that the CLI
prints as one line. The socket is bound here and handed to uvicorn, so the port
cannot be taken while the model loads. SIGTERM (or Ctrl-C) marks the app as
draining: waiting handlers cancel their generations and answer 503 within a
poll interval, and uvicorn's graceful shutdown is capped at
``graceful_shutdown_s`` for anything left.
"""

from __future__ import annotations

import errno
import ipaddress
import math
import os
import signal
import socket
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

from memrl.serve.app import create_app
from memrl.serve.limits import ServeLimits


def check_port(port: int) -> None:
    if not 1 <= port <= 65535:
        raise ValueError(f"--port {port}: a TCP port is between 1 and 65535")


def bind_socket(host: str, port: int) -> socket.socket:
    """A bound (not yet listening) TCP socket, or a one-line ``ValueError``."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise ValueError(f"--host {host}: cannot resolve it ({exc.strerror})") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: restarts need no wait
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ValueError(f"port {port} on {host} is already in use (pick another with --port)") from None
        raise ValueError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` resolves to is a loopback address (unresolvable: no)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class AnnouncingServer(uvicorn.Server):
    """uvicorn's server, plus: print ``banner`` once listening, drain ``app`` on a signal (its handlers cancel
    their work at their next poll), and remember whether Ctrl-C asked for the stop."""

    def __init__(self, config: uvicorn.Config, app: Any, banner: str) -> None:
        super().__init__(config)
        self._app = app
        self._banner = banner
        self.interrupted = False

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            print(self._banner, file=sys.stderr, flush=True)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._app.state.draining = True
        self.interrupted = self.interrupted or sig == signal.SIGINT
        super().handle_exit(sig, frame)

    def run_until_stopped(self, sock: socket.socket) -> bool:
        """Serve on ``sock`` until a signal stops it; whether that was Ctrl-C. uvicorn re-raises the signal once
        it has shut down, which does nothing where the shell started the process with SIGINT ignored
        (``cmd &``): the caller decides the exit status from the answer, not from a KeyboardInterrupt."""
        try:
            self.run(sockets=[sock])
        except KeyboardInterrupt:
            pass
        return self.interrupted


def serve(model: str, host: str = "127.0.0.1", port: int = 8000, dtype: str = "auto",
          served_name: str | None = None, api_key_env: str | None = None, max_batch_size: int = 32, *,
          max_n: int = 16, max_body_mb: float = 8.0, max_model_len: int | None = None,
          graceful_shutdown_s: float = 5.0, engine: str = "hf") -> None:
    """Load ``model`` into a batching HF engine (or in-process vLLM) and serve it (blocking)."""
    check_port(port)
    _check_engine_kind(engine)
    if max_n < 1:
        raise ValueError(f"--max-n {max_n}: must be >= 1")
    if not (math.isfinite(max_body_mb) and max_body_mb > 0):
        raise ValueError(f"--max-body-mb {max_body_mb}: must be a positive finite number")
    if max_batch_size < 1:
        raise ValueError(f"--max-batch-size {max_batch_size}: must be >= 1")
    if max_model_len is not None and max_model_len < 1:
        raise ValueError(f"--max-model-len {max_model_len}: must be >= 1")
    key = os.environ.get(api_key_env) if api_key_env else None
    if api_key_env and not key:
        raise ValueError(f"--api-key-env {api_key_env}: that environment variable is not set")
    sock = bind_socket(host, port)
    try:
        if key is None and not is_loopback(host):
            print(f"warning: serving on {host} without an API key: anyone who can reach this address can use "
                  "the model (set --api-key-env)", file=sys.stderr, flush=True)
        from memrl.models.resolve import load_tokenizer

        tokenizer = load_tokenizer(model, field="--model")  # first: a bad --model is named as the flag, cheaply
        net, eng = _load(engine, model, dtype, max_batch_size, max_model_len)
        limits = ServeLimits.for_model(net, max_model_len=max_model_len, max_n=max_n,
                                       max_body_bytes=int(max_body_mb * 2**20))
        local = ["127.0.0.1", "localhost", "[::1]", host] if key is None and is_loopback(host) else None
        name = served_name or served_name_for(model)
        app = create_app(eng, tokenizer, name, api_key=key, limits=limits, access_log=True,
                         local_hosts=local, also_named=() if served_name or name == model else (model,))
        config = uvicorn.Config(app, log_level="warning", access_log=False,
                                timeout_graceful_shutdown=max(1, round(graceful_shutdown_s)))
        if AnnouncingServer(config, app, f"listening on {url_of(sock)}").run_until_stopped(sock):
            raise SystemExit(130)  # Ctrl-C's exit status
    finally:
        sock.close()


def served_name_for(model: str) -> str:
    """The name ``/v1/models`` gives a model: a local folder's own name (as MemAgent's and ReMemR1's serving
    scripts name a checkpoint, and wait for that id), else ``model`` as given (a hub id, an alias)."""
    path = Path(model).expanduser()
    if not path.is_dir():
        return model
    return path.absolute().name or path.resolve().name  # a link's own name (runs/latest), as the scripts see it


def _check_engine_kind(kind: str) -> None:
    """``--engine`` names a registered engine kind that loads the model itself (not a remote server's client)."""
    from memrl.config.registry import ENGINES
    from memrl.engines.factory import engine_kind, trainable_engine_kinds

    if kind not in ENGINES.names or not engine_kind(kind).receives_weights:
        raise ValueError(f"--engine {kind}: use {' or '.join(trainable_engine_kinds())}")


def _load(kind: str, model: str, dtype: str, max_batch_size: int, max_model_len: int | None) -> tuple[Any, Any]:
    """(object whose ``config`` gives the limits, engine): the engine ``engine.kind=kind`` builds for training."""
    from types import SimpleNamespace

    from transformers import AutoConfig

    from memrl.config import load_config
    from memrl.engines.factory import build_engine
    from memrl.models.resolve import resolve_model_path

    overrides = [f"model.path={model}", f"model.dtype={dtype}", f"engine.kind={kind}",
                 f"engine.max_batch_size={max_batch_size}", "trainer.seed=0",
                 "engine.continuous_batching=true"]  # clients arrive whenever: a request joins the running batch
    if max_model_len is not None:
        overrides.append(f"engine.vllm.max_model_len={max_model_len}")
    engine = build_engine(load_config(None, overrides))
    net = getattr(engine, "model", None)  # an in-process torch model knows its embedding rows
    if net is None or not hasattr(net, "get_input_embeddings"):
        net = SimpleNamespace(config=AutoConfig.from_pretrained(resolve_model_path(model)))
    return net, engine
