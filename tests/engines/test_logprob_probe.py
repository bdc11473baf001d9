"""The start-up probe that tells a server's temperature-scaled log-probs from raw ones."""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from memrl.config import load_config
from memrl.engines.base import EngineError
from memrl.engines.factory import build_engine
from memrl.engines.logprob_probe import RAW, SCALED, UNKNOWN, classify
from memrl.engines.openai import OpenAIEngine

LOGITS = {"token_id:11": 2.0, "token_id:12": 1.0, "token_id:13": -0.5}


def _log_softmax(temperature: float) -> dict[str, float]:
    z = {k: v / temperature for k, v in LOGITS.items()}
    lse = math.log(sum(math.exp(v) for v in z.values()))
    return {k: v - lse for k, v in z.items()}


def test_classify_by_hand():
    assert classify(_log_softmax(1.0), _log_softmax(0.5)) == SCALED  # gap 1.0 -> 2.0
    assert classify(_log_softmax(1.0), _log_softmax(1.0)) == RAW  # gaps unchanged
    assert classify({"a": -1.0}, {"a": -1.0}) == UNKNOWN  # one token: no gap to compare
    assert classify({"a": -1.0, "b": -1.0}, {"a": -1.0, "b": -1.0}) == UNKNOWN


def _serve(raw: bool | None):
    """A stand-in /v1/completions: raw or temperature-scaled top log-probs (None: no top log-probs)."""
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            top = _log_softmax(1.0 if raw else body["temperature"]) if raw is not None else None
            lp = {"tokens": ["token_id:11"], "token_logprobs": [-0.3], "top_logprobs": [top] if top else None}
            out = json.dumps({"choices": [{"token_ids": [11], "logprobs": lp, "finish_reason": "length"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("raw, expected", [(False, SCALED), (True, RAW), (None, UNKNOWN)])
def test_probe_reads_the_server(raw, expected, capsys):
    server = _serve(raw)
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        eng = OpenAIEngine(url, "m", api_key_env=None)
        if expected == RAW:
            with pytest.raises(EngineError, match="--logprobs-mode processed_logprobs"):
                eng.check_logprobs(0.6)
        else:
            assert eng.check_logprobs(0.6) == expected
        assert eng.logprob_definition == expected
        if expected == UNKNOWN:
            assert "could not tell" in capsys.readouterr().err
    finally:
        server.shutdown()


def test_the_factory_probes_only_where_temperature_matters():
    server = _serve(True)
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    base = ["engine.kind=openai", f"engine.base_url={url}", "model.path=tiny"]
    try:
        with pytest.raises(EngineError, match="raw log-probs"):
            build_engine(load_config(None, [*base, "sampling.temperature=0.6"]))
        assert build_engine(load_config(None, [*base, "sampling.temperature=1.0"])).logprob_definition == "unchecked"
        off = build_engine(load_config(None, [*base, "sampling.temperature=0.6", "engine.logprob_check=false"]))
        assert off.logprob_definition == "unchecked"
    finally:
        server.shutdown()


def test_a_raw_server_is_one_line_from_the_cli_and_filtering_is_noted(tmp_path, capsys):
    """The refusal reached users as a 53-line traceback; with top-p/top-k a processed server's log-probs are
    renormalised, which the factory says in one line (as the in-process vLLM engine does)."""
    from typer.testing import CliRunner

    from memrl.cli.main import app

    data = tmp_path / "eval.jsonl"
    data.write_text(json.dumps({"context": "The code is 7.", "input": "What is the code?", "answers": ["7"]}) + "\n")
    raw, scaled = _serve(True), _serve(False)
    try:
        url = f"http://127.0.0.1:{raw.server_address[1]}/v1"
        r = CliRunner().invoke(app, ["eval", "--engine", "openai", "--base-url", url, "--temperature", "0.6",
                                     "--model", "tiny", "--workflow", "memagent", "--data", str(data),
                                     "--out", str(tmp_path / "e")])
        assert r.exit_code == 2 and "Traceback" not in r.output and "raw log-probs" in r.output, r.output
        ok = f"http://127.0.0.1:{scaled.server_address[1]}/v1"
        build_engine(load_config(None, ["engine.kind=openai", f"engine.base_url={ok}", "model.path=tiny",
                                        "sampling.temperature=0.6", "sampling.top_k=20"]))
        assert "renormalised over the top-k/top-p set" in capsys.readouterr().err
    finally:
        raw.shutdown()
        scaled.shutdown()
