"""``memrl serve`` as a real process on 127.0.0.1: flag errors, start-up line, disconnects, SIGTERM."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from memrl.serve.server import is_loopback

KEY = "sekrit-789"
AUTH = {"Authorization": f"Bearer {KEY}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memrl.cli.main", "serve", "--model", "tiny", *args],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, "MEMRL_TEST_KEY": KEY})


@pytest.mark.parametrize("port", ["99999", "0", "-5"])
def test_port_out_of_range_is_one_line(port):
    r = serve_cli("--port", port)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"error: --port {port}: a TCP port is between 1 and 65535"]


def test_port_in_use_is_one_line():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = serve_cli("--port", str(port))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [f"error: port {port} on 127.0.0.1 is already in use "
                                             "(pick another with --port)"]


def test_loopback_detection_for_the_no_key_warning():
    assert is_loopback("127.0.0.1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("no-such-host.invalid")


@pytest.mark.parametrize("with_key", [False, True])
def test_public_address_without_key_warns_before_loading(monkeypatch, capsys, tmp_path, with_key):
    """Bound to 127.0.0.1 but told it is public: the warning comes before the (failing) model load."""
    import memrl.serve.server as server

    monkeypatch.setattr(server, "is_loopback", lambda host: False)
    monkeypatch.setenv("MEMRL_TEST_KEY", KEY)
    with pytest.raises(Exception, match="missing-model"):
        server.serve(str(tmp_path / "missing-model"), port=free_port(),
                     api_key_env="MEMRL_TEST_KEY" if with_key else None)
    err = capsys.readouterr().err
    assert err.startswith("warning: serving on 127.0.0.1 without an API key") != with_key


class Server:
    """A ``memrl serve`` subprocess with its output in a file (a full pipe would block its access log)."""

    def __init__(self, tmp_path: Path, ignore_sigint: bool = False) -> None:
        self.port = free_port()
        self.log = tmp_path / f"serve-{self.port}.log"
        self._out = self.log.open("w")
        self.proc = subprocess.Popen([sys.executable, "-m", "memrl.cli.main", "serve", "--model", "tiny", "--port",
                                      str(self.port), "--api-key-env", "MEMRL_TEST_KEY"],
                                     env={**os.environ, "MEMRL_TEST_KEY": KEY}, stdout=self._out,
                                     stderr=subprocess.STDOUT,
                                     preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
                                     if ignore_sigint else None)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 180
        while "listening on" not in self.output():
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                pytest.fail(f"server did not start: {self.output()}")
            time.sleep(0.2)

    def output(self) -> str:
        return self.log.read_text()

    def wait_for_line(self, needle: str, limit_s: float = 120) -> None:
        deadline = time.time() + limit_s
        while needle not in self.output():
            assert time.time() < deadline, f"{needle!r} not in server output: {self.output()}"
            time.sleep(0.1)

    def send_raw(self, body: dict) -> socket.socket:
        """Send a completion request on a raw socket (so the test decides when the client leaves)."""
        data = json.dumps(body).encode()
        head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n").encode()
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=120)
        sock.sendall(head + data)
        # A later request's answer means the server loop has taken this connection in.
        assert httpx.get(self.url + "/health", timeout=60).status_code == 200
        return sock

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self._out.close()


LONG = {"model": "tiny", "prompt": [5, 6, 7], "max_tokens": 100_000, "temperature": 0, "ignore_eos": True}


def test_started_server_announces_itself_and_cancels_a_departed_client(tmp_path):
    server = Server(tmp_path, ignore_sigint=True)  # as a shell's `memrl serve ... &` starts it
    try:
        assert f"listening on http://127.0.0.1:{server.port}" in server.output()
        server.send_raw(LONG).close()  # the client gives up on a ~100K-token generation
        server.wait_for_line("POST /v1/completions 499")
        # The engine is free again: a short request is answered instead of queuing behind 100K tokens.
        r = httpx.post(server.url + "/v1/completions", headers=AUTH, timeout=120,
                       json={"model": "tiny", "prompt": [5, 6], "max_tokens": 3})
        assert r.status_code == 200 and len(r.json()["choices"][0]["token_ids"]) <= 3
        server.wait_for_line("POST /v1/completions 200")
        assert KEY not in server.output()
        server.proc.send_signal(signal.SIGINT)  # Ctrl-C: a graceful stop, and Ctrl-C's exit status
        assert server.proc.wait(timeout=60) == 130, server.output()
    finally:
        server.stop()


def test_sigterm_answers_in_flight_requests_and_exits(tmp_path):
    server = Server(tmp_path)
    try:
        sock = server.send_raw(LONG)
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=60)  # without draining it would wait for the 100K-token generation
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        sock.close()
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503")
        assert json.loads(body)["error"]["code"] == "shutting_down"
    finally:
        server.stop()


@pytest.mark.parametrize("kind", ["openai", "nope"])
def test_engine_must_be_a_kind_that_loads_the_model(kind):
    from memrl.serve.server import serve

    with pytest.raises(ValueError, match=rf"^--engine {kind}: use hf or vllm$"):
        serve("tiny", port=8000, engine=kind)
