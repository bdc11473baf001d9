"""``memrl train`` in online mode, run by an external agent process: 2 GRPO steps on the tiny model.

The agent (a plain ``requests`` script, no memrl import) finds the endpoint in ``RUN/online.json``,
asks for episodes with the session key, makes its model calls on each episode's base URL, and posts
rewards. Step 1's group loses one episode the agent abandons (dropped after episode_timeout_s, its
late reward refused with a 410) and gets one reward posted twice (409); step 2's group is whole.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("requests", reason="the external agent of this test uses requests")

KEY = "sk-rl-online-test-key"
SAMPLES = [{"question": "What is 2 + 3?", "answer": "5"}, {"question": "Name a colour.", "answer": "red"}]
CONFIG = """
model: {path: tiny}
engine: {device: cpu}
data: {train_file: samples.jsonl}
algorithm: {n: 2}
workflow:
  name: agent
  options: {mode: online, episode_timeout_s: 4, max_tokens: 4}
trainer: {total_steps: 2, prompts_per_step: 1, lr: 1.0e-3, output_dir: run}
"""

AGENT = r'''
import json, os, pathlib, sys, time
import requests

run = pathlib.Path(sys.argv[1])
auth = {"Authorization": "Bearer " + os.environ["MEMRL_SESSION_KEY"]}
deadline = time.time() + 400
while not (run / "online.json").exists():
    assert time.time() < deadline, "the run never opened its endpoint"
    time.sleep(0.2)
url = json.loads((run / "online.json").read_text())["url"]
log = []


def claim():
    while True:
        r = requests.post(url + "/rl/episodes", headers=auth, json={"wait_s": 4}, timeout=30)
        if r.status_code == 200:
            return r.json()
        assert r.status_code == 503 and time.time() < deadline, r.text


def call(ep):
    r = requests.post(ep["base_url"] + "/chat/completions", headers={"Authorization": "Bearer " + ep["api_key"]},
                      json={"model": ep["model"], "max_tokens": 4,
                            "messages": [{"role": "user", "content": ep["sample"]["question"]}]}, timeout=120)
    r.raise_for_status()
    return r.json()["choices"][0]["message"]["content"]


def post(url_, body, headers=auth):
    r = requests.post(url_, headers=headers, json=body, timeout=30)
    error = r.json().get("error") or {}
    log.append({"status": r.status_code, "param": error.get("param"), "message": error.get("message")})
    return r


gone, twice = claim(), claim()                      # step 1: one GRPO group, the same sample twice
call(gone), call(twice)
post(twice["reward_url"], {"reward": 1.0})
post(twice["reward_url"], {"reward": 0.0})          # again: 409
post(url + "/rl/episodes/no-such-episode/reward", {"reward": 1.0})  # 404
first, second = claim(), claim()                    # step 2: after `gone` was dropped and step 1 trained
for k, ep in enumerate((first, second)):
    call(ep)
    post(ep["reward_url"], {"reward": "high"})      # 400 naming the field
    post(ep["reward_url"], {"reward": float(k), "metrics": {"agent_k": k},
                            "turn_rewards": [{"call": 0, "reward": 0.25}]},
         headers={"Authorization": "Bearer " + ep["api_key"]})  # the episode's own key works too
post(gone["reward_url"], {"reward": 1.0})           # too late: 410
print(json.dumps({"log": log, "episodes": [{k: e[k] for k in ("id", "group_id", "sample")}
                                           for e in (gone, twice, first, second)]}))
'''


def test_an_external_agent_trains_two_steps(tmp_path: Path) -> None:
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in SAMPLES))
    (tmp_path / "online.yaml").write_text(CONFIG)
    (tmp_path / "agent.py").write_text(AGENT)
    env = {**os.environ, "MEMRL_SESSION_KEY": KEY}
    trainer = subprocess.Popen([sys.executable, "-m", "memrl.cli.main", "train", "online.yaml"], cwd=tmp_path,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        agent = subprocess.run([sys.executable, "agent.py", "run"], cwd=tmp_path, env=env, capture_output=True,
                               text=True, timeout=500)
        out, err = trainer.communicate(timeout=300)
    finally:
        trainer.kill()
    assert agent.returncode == 0, agent.stderr[-3000:] + err[-3000:]
    assert trainer.returncode == 0, err[-3000:]
    report = json.loads(agent.stdout.strip().splitlines()[-1])
    gone, twice, first, second = report["episodes"]
    assert gone["group_id"] == twice["group_id"] != first["group_id"] == second["group_id"]
    assert gone["sample"] == twice["sample"] and first["sample"] == second["sample"]
    statuses = [(e["status"], e["param"]) for e in report["log"]]
    assert statuses == [(200, None), (409, None), (404, None), (400, "reward"), (200, None), (400, "reward"),
                        (200, None), (410, None)]
    assert twice["id"] in report["log"][1]["message"] and gone["id"] in report["log"][-1]["message"]

    run = tmp_path / "run"
    steps = [m for m in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "reward" in m]
    assert [m["step"] for m in steps] == [1, 2]
    assert [m["failed_episodes"] for m in steps] == [1, 1]  # since the start: the abandoned episode, dropped
    rollouts = [[json.loads(x) for x in f.read_text().splitlines()] for f in sorted(run.glob("rollouts/step_*"))]
    assert [len(r) for r in rollouts] == [1, 2]  # step 1's group trained without it
    assert sorted(r["reward"] for r in rollouts[1]) == [0.0, 1.0]
    assert all(r["conversations"][0]["reward"] == 0.25 for r in rollouts[1])
    assert "dropped" in err and KEY not in out + err  # the key came from the environment: never printed
    assert all(KEY not in f.read_text(errors="replace") for f in run.rglob("*") if f.is_file())
