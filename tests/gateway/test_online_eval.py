"""``memrl eval`` of an online agent: the endpoint file lands in ``--out`` (it went to ``runs/default``, beside
whatever training run lived there), and the agent's posted rewards are the eval's results."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("requests", reason="the external agent of this test uses requests")

AGENT = r'''
import json, os, pathlib, sys, time
import requests

out = pathlib.Path(sys.argv[1])
auth = {"Authorization": "Bearer " + os.environ["MEMRL_SESSION_KEY"]}
deadline = time.time() + 90
while not (out / "online.json").exists():
    assert time.time() < deadline, "the eval never opened its endpoint"
    time.sleep(0.2)
url = json.loads((out / "online.json").read_text())["url"]
for k in range(2):
    while True:
        r = requests.post(url + "/rl/episodes", headers=auth, json={"wait_s": 4}, timeout=30)
        if r.status_code == 200:
            break
        assert r.status_code == 503 and time.time() < deadline, r.text
    ep = r.json()
    requests.post(ep["base_url"] + "/chat/completions", headers={"Authorization": "Bearer " + ep["api_key"]},
                  json={"model": ep["model"], "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]},
                  timeout=120).raise_for_status()
    requests.post(ep["reward_url"], headers=auth, json={"reward": float(ep["sample"]["n"] == 0)},
                  timeout=30).raise_for_status()
'''


def test_an_online_eval_writes_its_endpoint_into_out(tmp_path):
    (tmp_path / "samples.jsonl").write_text('{"n": 0}\n{"n": 1}\n')
    (tmp_path / "agent.py").write_text(AGENT)
    env = {**os.environ, "MEMRL_SESSION_KEY": "sk-rl-online-eval-key", "HF_HUB_OFFLINE": "1"}
    agent = subprocess.Popen([sys.executable, "agent.py", "ev"], cwd=tmp_path, env=env)
    try:
        r = subprocess.run([sys.executable, "-m", "memrl.cli.main", "eval", "--model", "tiny", "--workflow", "agent",
                            "--data", "samples.jsonl", "--out", "ev", "engine.device=cpu",
                            "workflow.options.mode=online", "workflow.options.episode_timeout_s=30"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stderr[-2000:]
        assert agent.wait(timeout=60) == 0
    finally:
        agent.kill()
    assert not (tmp_path / "ev" / "online.json").exists()  # the agent found it there; the ended run removed it
    assert not (tmp_path / "runs").exists()
    results = json.loads((tmp_path / "ev" / "results.json").read_text())
    assert results["episodes"] == 2 and results["mean_reward"] == 0.5
