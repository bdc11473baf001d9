"""The local view server holds its ground: refuses other Host names, keeps tracebacks home, serves NaN rewards."""

from __future__ import annotations

import http.client
import json
import shutil
import socket

import pytest
from typer.testing import CliRunner

from memrl.cli.main import app
from memrl.view import server as view_server
from memrl.view.server import make_server
from tests.view.test_page import serving


def request(base: str, path: str, host: str | None) -> tuple[int, str]:
    """GET with an explicit Host header (None: send none at all)."""
    hostname, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(hostname, int(port), timeout=60)
    try:
        conn.putrequest("GET", path, skip_host=True)
        if host is not None:
            conn.putheader("Host", host)
        conn.endheaders()
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


def test_only_requests_addressed_to_the_server_are_answered(run_dir):
    """A DNS-rebinding page sends its own name as Host: refused, page and episodes alike."""
    with serving(run_dir) as base:
        port = base.rsplit(":", 1)[1]
        assert request(base, "/", f"127.0.0.1:{port}")[0] == 200
        assert request(base, "/", f"LOCALHOST:{port}")[0] == 200
        for bad in (f"attacker.example:{port}", "attacker.example", f"127.0.0.1:{int(port) + 1}", "127.0.0.1",
                    f"localhost.attacker.example:{port}", "", None):
            code, body = request(base, "/", bad)
            assert code == 403 and "memrl-data" not in body, bad
            assert request(base, "/episode?id=1-0", bad)[0] == 403, bad


def test_a_failing_request_sends_a_short_message_and_logs_the_traceback(run_dir, monkeypatch, capsys):
    def boom(*args, **kwargs):
        raise RuntimeError(f"cannot read {run_dir}/secret")

    monkeypatch.setattr(view_server, "load_episode", boom)
    with serving(run_dir) as base:
        code, body = request(base, "/episode?id=1-0", base.removeprefix("http://"))
    assert code == 500 and len(body.splitlines()) == 1
    assert "Traceback" not in body and str(run_dir) not in body and "/" not in body.replace("\n", "")
    err = capsys.readouterr().err
    assert "Traceback" in err and f"{run_dir}/secret" in err  # the details stay on the console


def test_an_episode_with_a_nan_or_infinite_reward_is_served_as_null(run_dir, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    path = run / "rollouts" / "step_000001.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    recs[0]["reward"], recs[1]["reward"] = float("nan"), float("-inf")
    recs[0]["conversations"][0]["reward"] = float("inf")
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))  # NaN/Infinity: what Python writes
    with serving(run) as base:
        host = base.removeprefix("http://")
        for i in (0, 1):
            code, body = request(base, f"/episode?id=1-{i}", host)
            assert code == 200, body
            assert json.loads(body)["reward"] is None
        assert json.loads(request(base, "/episode?id=1-0", host)[1])["conversations"][0]["reward"] is None
        assert request(base, "/", host)[0] == 200


@pytest.mark.parametrize("port", [70000, -1])
def test_a_port_out_of_range_is_one_line(run_dir, port):
    r = CliRunner().invoke(app, ["view", str(run_dir), "--port", str(port)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert f"--port {port}: a port is 0-65535" in r.output


def test_a_port_in_use_is_one_line(run_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = CliRunner().invoke(app, ["view", str(run_dir), "--port", str(port)])
    assert r.exit_code == 2
    assert f"error: --port {port}: cannot listen on 127.0.0.1:{port}" in r.output
    assert "in use" in r.output and len(r.output.strip().splitlines()) == 1


def test_make_server_refuses_a_bad_port_without_binding(run_dir):
    with pytest.raises(ValueError, match="0-65535"):
        make_server(run_dir, 65536)
