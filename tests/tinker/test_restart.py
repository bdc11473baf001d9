"""``memrl tinker`` as a command: one-line refusals, Ctrl-C, and a restart that finds the saved state.

A first server runs as ``memrl tinker`` in a subprocess; a script trains it two steps and saves a
training state and sampler weights; Ctrl-C (SIGINT) stops it cleanly (exit 130, Ctrl-C's). A second server on the
same ``--state-dir`` (a new process's worth of memory: nothing carried over but the folder) resumes
from the ``tinker://`` paths: the same weights, the same Adam moments, the same greedy samples.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

from memrl.tinker.server import resolve_key  # noqa: E402
from tests.tinker.conftest import KEY, Running, free_port, service_client  # noqa: E402

pytestmark = pytest.mark.timeout(180)
TEXT = "Memory: the key is 42 and the value is blue."


def memrl(*args: str, env: dict[str, str] | None = None, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "memrl.cli.main", "tinker", *args],
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)


@pytest.mark.parametrize("args, needle", [
    (["--engine", "vllm"], "--engine vllm: memrl tinker trains and samples one in-process"),
    (["--api-key", "secret-123"], "--api-key: the tinker SDK sends only keys that start with 'tml-'"),
    (["--port", "0"], "--port 0: a TCP port is between 1 and 65535"),
    (["--max-datums", "0"], "--max-datums 0: must be >= 1"),
])
def test_flags_are_refused_in_one_line_before_the_model_loads(args, needle):
    from typer.testing import CliRunner

    from memrl.cli.main import app

    r = CliRunner().invoke(app, ["tinker", "--model", "no/such-model", *args])
    lines = r.output.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines


def test_a_missing_key_is_generated_and_a_given_one_kept(monkeypatch):
    monkeypatch.delenv("MEMRL_TINKER_API_KEY", raising=False)
    key, generated = resolve_key(None)
    assert generated and key.startswith("tml-") and len(key) > 24 and resolve_key(None)[0] != key
    monkeypatch.setenv("MEMRL_TINKER_API_KEY", "tml-from-env-1")
    assert resolve_key(None) == ("tml-from-env-1", False) and resolve_key("tml-flag-123") == ("tml-flag-123", False)


def _nll(tc, datum) -> float:
    return tc.forward([datum], "cross_entropy").result(timeout=60).metrics["loss:sum"]


def test_ctrl_c_then_a_new_server_resumes_from_the_state_dir(tmp_path):
    port = free_port()
    # started as a shell's `cmd &` starts it, SIGINT ignored: the graceful stop and exit status 130 must not
    # depend on Python's own Ctrl-C handler being installed
    proc = memrl("--model", "tiny", "--port", str(port), "--state-dir", str(tmp_path),
                 env={"MEMRL_TINKER_API_KEY": KEY, "TINKER_TELEMETRY": "0"},
                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            if httpx.get(url + "/api/v1/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "memrl tinker did not start"
        time.sleep(0.2)
    sc = service_client(url)
    tc = sc.create_lora_training_client(base_model="tiny", rank=4, seed=0).result(timeout=60)
    ids = tc.get_tokenizer().encode(TEXT)
    datum = types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                        loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)})
    for _ in range(2):
        tc.forward_backward([datum], "cross_entropy")
        tc.optim_step(types.AdamParams(learning_rate=1e-2))
    state = tc.save_state("resume-me").result(timeout=60).path
    sampler_path = tc.save_weights_for_sampler("for-sampling").result(timeout=60).path
    before = _nll(tc, datum)
    greedy = types.SamplingParams(max_tokens=8, temperature=0.0)
    prompt = types.ModelInput.from_ints(ids[:4])
    tokens = tc.create_sampling_client(sampler_path).result(timeout=60).sample(prompt, 1, greedy).result(60)
    sc.close("success").result(timeout=30)

    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err  # Ctrl-C's exit status, after the graceful stop
    assert "stopping" in err and "stopped" in err and "Traceback" not in err
    assert KEY not in err + out  # a given key is never printed

    second = Running(tmp_path)
    try:
        sc2 = service_client(second.url)
        resumed = sc2.create_training_client_from_state_with_optimizer(state).result(timeout=60)
        assert _nll(resumed, datum) == pytest.approx(before, abs=1e-4)
        again = sc2.create_sampling_client(model_path=sampler_path).result(timeout=60)
        assert again.sample(prompt, 1, greedy).result(60).sequences[0].tokens == tokens.sequences[0].tokens
        runs = tinker.RestClient(base_url=second.url, api_key=KEY).list_training_runs().result(timeout=30)
        assert tc.model_id in [r.training_run_id for r in runs.training_runs]
        sc2.close("success").result(timeout=30)
    finally:
        second.stop()
