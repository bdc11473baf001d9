"""memrl's CLI and trainer on vLLM itself: eval transcripts, training with weight sync, a dying engine."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM not installed: `make test-vllm` runs these with vLLM's CPU build")

import yaml  # noqa: E402

from memrl.config import MemRLConfig  # noqa: E402
from memrl.engines.base import SamplingParams  # noqa: E402
from memrl.engines.hf import HFEngine  # noqa: E402
from memrl.train.engine_sync import SYNC_PATH_CODES  # noqa: E402
from memrl.train.policy import merged_state_dict  # noqa: E402
from tests.vllm.conftest import VLLM_OVERRIDES  # noqa: E402
from tests.vllm.helpers import MEMAGENT, qa_file, train_config  # noqa: E402


def memrl(*args: object, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memrl.cli.main", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def test_eval_transcripts_equal_the_hf_engine(tmp_path):
    data = tmp_path / "data"
    qa_file(data / "eval_3.jsonl", 4)
    outs = {}
    for kind in ("hf", "vllm"):
        outs[kind] = tmp_path / kind
        r = memrl("eval", "--model", "tiny32", "--engine", kind, "--data", data, "--docs", "3", "--out", outs[kind],
                  "model.dtype=float32", *VLLM_OVERRIDES[3:], *MEMAGENT)
        assert r.returncode == 0, r.stderr[-3000:]
    names = sorted(p.relative_to(outs["hf"]) for p in (outs["hf"] / "transcripts").rglob("*.txt"))
    assert len(names) == 4
    for name in names:
        assert (outs["vllm"] / name).read_text() == (outs["hf"] / name).read_text(), name


def read_metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_train_cli_three_steps_syncs_weights(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(train_config(tmp_path, 3)))
    r = memrl("train", path)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [m for m in read_metrics(tmp_path / "run") if "reward" in m]
    assert [m["step"] for m in rows] == [1, 2, 3]
    for m in rows:
        assert m["logprob_mismatch"] < 1e-3, m  # float32: the engine samples from the policy's own weights
        assert m["sync_mb"] > 0
        assert m["sync/path"] == SYNC_PATH_CODES["shm"] and m["sync/gb_per_s"] > 0  # the CPU build's default
    from safetensors.torch import load_file

    steps = sorted((tmp_path / "run" / "checkpoints").glob("step_*"))
    assert len(steps) == 3
    weights = [load_file(next((s / "model").glob("*.safetensors"))) for s in steps]
    for a, b in zip(weights, weights[1:]):
        assert any(not a[k].equal(b[k]) for k in a)


def test_async_training_on_vllm_overlaps_and_syncs(tmp_path):
    """trainer.mode=async with vLLM in-process: episodes generate during updates, each piece tagged with
    its policy version, and every update reaches the engine."""
    path = tmp_path / "exp.yaml"
    cfg = train_config(tmp_path, 3)
    cfg["trainer"]["mode"] = "async"
    cfg["trainer"]["async"].update(max_staleness=1, partial_chunk_tokens=2)
    path.write_text(yaml.safe_dump(cfg))
    r = memrl("train", path)
    assert r.returncode == 0, r.stderr[-3000:]
    # every training step has a row; async `reward` averages only the episodes that finished during the
    # step's span, so a step whose groups were all buffered before the previous one has none
    rows = [m for m in read_metrics(tmp_path / "run") if "train_rows" in m]
    assert [m["step"] for m in rows] == [1, 2, 3] and any("reward" in m for m in rows)
    for m in rows:
        assert m["sync_mb"] > 0 and m["train_rows"] > 0
        assert m["async/staleness_0"] + m["async/staleness_1"] > 0 and m["async/dropped_stale"] == 0
    records = [json.loads(x) for f in sorted((tmp_path / "run" / "rollouts").glob("*.jsonl"))
               for x in f.read_text().splitlines()]
    versions = {v for rec in records for _, v in rec["info"]["policy_versions"]}
    assert versions <= {0, 1, 2} and len(versions) >= 2  # later steps trained on pieces of newer weights


def test_trained_policy_and_engine_agree(tmp_path):
    """After in-process training, the vLLM engine serves exactly the trained (merged LoRA) policy."""
    from memrl.train.trainer import Trainer

    cfg = MemRLConfig.model_validate(train_config(tmp_path, 2, lora__enabled=True, lora__r=8))
    trainer = Trainer(cfg)
    try:
        prompts = [[5, 6, 7, 8], [30, 31, 32, 33, 34]]
        sp = SamplingParams(max_new_tokens=10, greedy=True)

        async def greedy(eng):
            return await asyncio.gather(*(eng.generate(p, sp) for p in prompts))

        before = asyncio.run(greedy(trainer.engine))
        trainer.run()
        after = asyncio.run(greedy(trainer.engine))
        from memrl.models.resolve import load_model

        model = load_model("tiny32", "float32", "cpu")
        model.load_state_dict(merged_state_dict(trainer.policy))
        expected = asyncio.run(greedy(HFEngine(model)))
        assert [r.token_ids for r in after] == [r.token_ids for r in expected]
        for got, want in zip(after, expected):
            assert max(abs(a - b) for a, b in zip(got.logprobs, want.logprobs)) < 1e-4
        assert [r.logprobs for r in after] != [r.logprobs for r in before]
    finally:
        asyncio.run(trainer.engine.close())


def kill_vllm_when(proc: subprocess.Popen, ready, what: str) -> str:
    """Once ``ready()`` holds, SIGKILL vLLM's processes under ``proc``; return its stderr after it exits."""
    import psutil

    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None and not ready():
            time.sleep(0.5)
        assert proc.poll() is None, f"{what} ended before the engine was killed: " + proc.communicate()[1][-3000:]
        for child in psutil.Process(proc.pid).children(recursive=True):  # vLLM's engine core and worker
            child.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    return err


def test_killed_engine_stops_eval_with_an_error(tmp_path):
    data = tmp_path / "data"
    qa_file(data / "eval_3.jsonl", 200, words=400)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "memrl.cli.main", "eval", "--model", "tiny32", "--engine", "vllm",
                             "--data", data, "--docs", "3", "--out", out, "--concurrency", "2", "model.dtype=float32",
                             *VLLM_OVERRIDES[3:], *MEMAGENT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    err = kill_vllm_when(proc, lambda: (out / "episodes").is_dir() and any((out / "episodes").rglob("*.json")),
                         "eval")
    assert proc.returncode not in (0, None), err[-3000:]
    assert "engine" in err.lower() and "Traceback" not in err, err[-3000:]
    assert any((out / "episodes").rglob("*.json"))  # finished episodes stay on disk


def test_killed_engine_stops_training_with_an_error(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(train_config(tmp_path, 200)))
    proc = subprocess.Popen([sys.executable, "-m", "memrl.cli.main", "train", path], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    metrics = tmp_path / "run" / "metrics.jsonl"
    err = kill_vllm_when(proc, lambda: metrics.is_file() and metrics.read_text().count("\n") >= 1, "train")
    assert proc.returncode not in (0, None), err[-3000:]
    assert "engine" in err.lower() and "Traceback" not in err, err[-3000:]
    assert (tmp_path / "run" / "checkpoints").is_dir()  # the steps it finished are kept


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(server: subprocess.Popen, port: int) -> None:
    import httpx

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert server.poll() is None, server.communicate()[1][-3000:]
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise AssertionError("the server did not become healthy in 300 s")


def greedy_through_openai_equals_hf(port: int, served: str) -> None:
    from memrl.engines.openai import OpenAIEngine
    from memrl.models.resolve import load_model, load_tokenizer, resolve_model_path

    eng = OpenAIEngine(f"http://127.0.0.1:{port}/v1", model=served)
    hf = HFEngine(load_model(resolve_model_path("tiny32"), "float32", "cpu"))
    prompts = [[5, 6, 7, 8, 9], [100, 20, 30], list(range(40, 90))]
    sp = SamplingParams(max_new_tokens=10, greedy=True)

    async def greedy(e):
        return await asyncio.gather(*(e.generate(p, sp) for p in prompts))

    got, want = asyncio.run(greedy(eng)), asyncio.run(greedy(hf))
    for g, w in zip(got, want):
        assert g.token_ids == w.token_ids
        assert max(abs(a - b) for a, b in zip(g.logprobs, w.logprobs)) < 1e-3
    # a stop string: the server ends at the token completing it, where the HF engine given the tokenizer does
    hf.tokenizer = load_tokenizer("tiny32")
    text = hf.tokenizer.decode(want[2].token_ids[4:7], skip_special_tokens=True).strip()
    assert text, "greedy tokens 4-7 of the tiny model decode to text"
    stopped = sp.with_(stop=(text,))
    got_stop, want_stop = (asyncio.run(e.generate(prompts[2], stopped)) for e in (eng, hf))
    asyncio.run(eng.close())
    assert got_stop.finish_reason == want_stop.finish_reason == "stop"
    assert got_stop.token_ids == want_stop.token_ids and len(got_stop.token_ids) < 10


def stop(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()


@pytest.mark.parametrize("mode", ["raw_logprobs", "processed_logprobs"])
def test_openai_engine_against_a_real_vllm_server(mode):
    """``--engine openai`` on ``vllm.entrypoints.openai.api_server``: the HF engine's greedy answers, and the
    start-up probe tells vLLM's default raw log-probs (refused at temperature 0.6) from processed ones."""
    from memrl.engines.base import EngineError
    from memrl.engines.openai import OpenAIEngine
    from memrl.models.resolve import resolve_model_path

    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    server = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server",
                               "--model", resolve_model_path("tiny32"), "--host", "127.0.0.1", "--port", str(port),
                               "--dtype", "float32", "--max-model-len", "4096", "--enforce-eager",
                               "--served-model-name", "tiny32", "--logprobs-mode", mode],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_healthy(server, port)
        eng = OpenAIEngine(f"http://127.0.0.1:{port}/v1", "tiny32", api_key_env=None)
        if mode == "raw_logprobs":  # vLLM's default
            with pytest.raises(EngineError, match="--logprobs-mode processed_logprobs"):
                eng.check_logprobs(0.6)
            greedy_through_openai_equals_hf(port, "tiny32")
        else:
            assert eng.check_logprobs(0.6) == "temperature-scaled"
            logprob_texts_equal_vllms(port)
    finally:
        stop(server)


def logprob_texts_equal_vllms(port: int) -> None:
    """memrl's log-prob block (tokens, top alternatives, text offsets) for vLLM's own samples is vLLM's, partial
    characters included: "" until the token that finishes one, which carries it whole."""
    import random

    import httpx

    from memrl.engines.base import GenerationResult
    from memrl.models.resolve import load_tokenizer
    from memrl.serve.answers import Answers

    answers, rng, partial = Answers(load_tokenizer("tiny32")), random.Random(0), 0
    for seed in range(12):
        body = {"model": "tiny32", "prompt": [rng.randrange(100, 380) for _ in range(5)], "max_tokens": 12,
                "temperature": 1.0, "seed": seed, "logprobs": 3, "return_token_ids": True}
        got = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=60).json()["choices"][0]
        as_ids = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={**body, "return_tokens_as_token_ids": True},
                            timeout=60).json()["choices"][0]["logprobs"]["top_logprobs"]
        alts = [[(int(k.split(":")[1]), v) for k, v in step.items()] for step in as_ids]
        res = GenerationResult(got["token_ids"], got["logprobs"]["token_logprobs"], "length", {"top_logprobs": alts})
        mine = answers.completion_logprobs(res, 3, False)
        want = got["logprobs"]
        assert (mine["tokens"], mine["text_offset"]) == (want["tokens"], want["text_offset"])
        assert [sorted(step) for step in mine["top_logprobs"]] == [sorted(step) for step in want["top_logprobs"]]
        partial += want["tokens"].count("")
    assert partial, "no sample held part of a character: the comparison did not reach the case it is for"


def test_memrl_serve_with_the_vllm_engine():
    """``memrl serve --engine vllm``: the same answers through memrl's own server, on vLLM."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "memrl.cli.main", "serve", "--model", "tiny32", "--engine",
                               "vllm", "--dtype", "float32", "--port", str(port), "--max-model-len", "4096"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"})
    try:
        wait_healthy(server, port)
        greedy_through_openai_equals_hf(port, "tiny32")
    finally:
        stop(server)
