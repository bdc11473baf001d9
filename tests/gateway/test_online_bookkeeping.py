"""Online sessions' bookkeeping: episodes offered by the agent workflow, handed out in order to whoever asks
with the session key, rewarded once, dropped after their timeout; every refusal names what it refuses."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time

import httpx
import pytest

from memrl.engines.base import SamplingParams
from memrl.gateway import Gateway
from memrl.gateway.online import OnlineEpisodes
from memrl.gateway.online_run import OnlineEpisodeError
from memrl.gateway.workflow import AgentWorkflow
from memrl.testing.scripted import ScriptedEngine

KEY = "sk-rl-test"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture()
def online():
    gw = Gateway("tiny-policy", online=OnlineEpisodes(KEY))
    yield gw
    gw.close()


def _start(gw, tok, samples, **options) -> concurrent.futures.Future:
    """Run one online episode per (sample, group) in a thread, as the trainer's rollout does; their results."""
    wf = AgentWorkflow(mode="online", max_tokens=4, **options)
    engine = ScriptedEngine(lambda prompt, params: tok.encode(" ok", add_special_tokens=False) + [tok.eos_token_id])

    async def main():
        async def one(i, sample):
            return await wf.episode(sample, engine=engine, tokenizer=tok, sampling=SamplingParams(seed=i),
                                    services={"gateway": gw}, sample_id=str(sample["q"]), group_id=f"g{sample['q']}")

        tasks = []
        for i, s in enumerate(samples):  # offered one after another, as asyncio.gather starts them
            tasks.append(asyncio.ensure_future(one(i, s)))
            await asyncio.sleep(0)
        return await asyncio.gather(*tasks, return_exceptions=True)

    pool = concurrent.futures.ThreadPoolExecutor(1)
    future = pool.submit(asyncio.run, main())
    pool.shutdown(wait=False)
    return future


def _claim(http, gw, **body) -> httpx.Response:
    return http.post(f"{gw.url}/rl/episodes", headers=AUTH, json=body or {"wait_s": 10})


def _call(http, got, content="hi") -> httpx.Response:
    return http.post(f"{got['base_url']}/chat/completions", headers={"Authorization": f"Bearer {got['api_key']}"},
                     json={"messages": [{"role": "user", "content": content}], "max_tokens": 4})


def test_groups_are_handed_out_in_order_and_rewarded_once(online, tools_tokenizer):
    done = _start(online, tools_tokenizer, [{"q": 1}, {"q": 1}, {"q": 2}, {"q": 2}])
    with httpx.Client(timeout=30) as http:
        got = [_claim(http, online).json() for _ in range(4)]
        assert [g["sample"] for g in got] == [{"q": 1}, {"q": 1}, {"q": 2}, {"q": 2}]
        assert [g["group_id"] for g in got] == ["g1", "g1", "g2", "g2"] and len({g["id"] for g in got}) == 4
        assert got[0]["base_url"] == f"{online.url}/episodes/{got[0]['id']}/v1"
        early = http.post(got[0]["reward_url"], headers=AUTH, json={"reward": 1.0})
        assert early.status_code == 400 and early.json()["error"]["code"] == "no_model_call"
        for k, g in enumerate(got):
            assert _call(http, g).status_code == 200
            body = {"reward": float(k), "metrics": {"steps": 2}, "turn_rewards": [{"call": 0, "reward": 0.25}]}
            key = AUTH if k % 2 else {"Authorization": f"Bearer {g['api_key']}"}  # either key may post it
            assert http.post(g["reward_url"], headers=key, json=body).json() == {"id": g["id"], "status": "rewarded"}
        twice = http.post(got[1]["reward_url"], headers=AUTH, json={"reward": 1.0})
        assert twice.status_code == 409 and got[1]["id"] in twice.json()["error"]["message"]
        unknown = http.post(f"{online.url}/rl/episodes/nope/reward", headers=AUTH, json={"reward": 1.0})
        assert unknown.status_code == 404
        status = http.get(f"{online.url}/rl/status", headers=AUTH).json()
    trajs = done.result(timeout=30)
    assert [t.reward for t in trajs] == [0.0, 1.0, 2.0, 3.0]
    assert all(t.metrics["steps"] == 2 and t.metrics["model_calls"] == 1 for t in trajs)
    assert all([c.reward for c in t.conversations] == [0.25] for t in trajs)
    assert status == {"waiting": 0, "running": 0, "offered": 4, "claimed": 4, "rewarded": 4, "dropped": 0}


def test_an_abandoned_episode_is_dropped_and_its_late_reward_refused(online, tools_tokenizer):
    done = _start(online, tools_tokenizer, [{"q": 1}, {"q": 1}], episode_timeout_s=1.0)
    with httpx.Client(timeout=30) as http:
        gone, kept = _claim(http, online).json(), _claim(http, online).json()
        assert _call(http, gone).status_code == 200 and _call(http, kept).status_code == 200
        assert http.post(kept["reward_url"], headers=AUTH, json={"reward": 1.0}).status_code == 200
        results = done.result(timeout=30)
        late = http.post(gone["reward_url"], headers=AUTH, json={"reward": 1.0})
        after = _call(http, gone)
    assert isinstance(results[0], OnlineEpisodeError) and "no reward came within 1 s" in str(results[0])
    assert results[1].reward == 1.0
    assert late.status_code == 410 and late.json()["error"]["code"] == "episode_expired"
    assert after.status_code == 404  # its endpoint closed with it


def test_requests_are_checked_before_anything_changes(online, tools_tokenizer):
    done = _start(online, tools_tokenizer, [{"q": 1}], episode_timeout_s=30)
    with httpx.Client(timeout=30) as http:
        assert http.post(f"{online.url}/rl/episodes", json={}).status_code == 401
        assert http.get(f"{online.url}/rl/status", headers={"Authorization": "Bearer nope"}).status_code == 401
        for body, param in [({"wait_s": -1}, "wait_s"), ({"wait_s": "x"}, "wait_s"), ({"n": 2}, "n"), ([], "body")]:
            r = http.post(f"{online.url}/rl/episodes", headers=AUTH, json=body)
            assert (r.status_code, r.json()["error"]["param"]) == (400, param)
        got = _claim(http, online).json()
        assert _call(http, got).status_code == 200
        other = http.post(got["reward_url"], headers={"Authorization": "Bearer sk-ep-other"}, json={"reward": 1})
        assert other.status_code == 401
        for body, param in [({}, "reward"), ({"reward": "1"}, "reward"), ({"reward": 1, "metrics": {"a": None}},
                            "metrics.a"), ({"reward": 1, "turn_rewards": [{"call": 1, "reward": 1}]},
                            "turn_rewards[0].call"), ({"reward": 1, "note": "x"}, "note")]:
            r = http.post(got["reward_url"], headers=AUTH, json=body)
            assert (r.status_code, r.json()["error"]["param"]) == (400, param), body
        bad_json = http.post(got["reward_url"], headers={**AUTH, "content-type": "application/json"}, content=b"{")
        assert bad_json.status_code == 400
        deep = b'{"reward": 1, "metrics": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        nested = http.post(got["reward_url"], headers={**AUTH, "content-type": "application/json"}, content=deep)
        assert (nested.status_code, nested.json()["error"]["message"]) == (400, "body: nested too deeply")
        huge = http.post(got["reward_url"], headers=AUTH, json={"reward": 1e308})
        assert (huge.status_code, huge.json()["error"]["param"]) == (400, "reward")
        per_call = http.post(got["base_url"].removesuffix("/v1") + "/reward", json={"turn_rewards": [2.0]},
                             headers={"Authorization": f"Bearer {got['api_key']}"})
        assert per_call.json() == {"id": got["id"], "status": "running"}
        assert http.post(got["reward_url"], headers=AUTH, json={"reward": 0.5}).status_code == 200
        start = time.monotonic()
        empty = http.post(f"{online.url}/rl/episodes", headers=AUTH, json={"wait_s": 0.3})
    traj = done.result(timeout=30)
    assert traj[0].reward == 0.5 and traj[0].conversations[0].reward == 2.0  # the checked posts changed nothing
    assert empty.status_code == 503 and empty.headers["retry-after"] == "1" and time.monotonic() - start >= 0.3


def test_an_episode_that_failed_refuses_its_reward(online, tools_tokenizer):
    done = _start(online, tools_tokenizer, [{"q": 1}], max_calls=1)
    with httpx.Client(timeout=30) as http:
        got = _claim(http, online).json()
        assert _call(http, got).status_code == 200 and _call(http, got).status_code == 403
        r = http.post(got["reward_url"], headers=AUTH, json={"reward": 1.0})
    assert r.status_code == 410 and r.json()["error"]["code"] == "episode_failed" and "max_calls" in r.text
    (result,) = done.result(timeout=30)
    assert "made more than 1 model calls" in str(result)


def test_options():
    with pytest.raises(ValueError, match="mode online runs no program"):
        AgentWorkflow(mode="online", program="tests.gateway.programs:two_calls")
    with pytest.raises(ValueError, match="exactly one of workflow.options.program"):
        AgentWorkflow(mode="program")
    with pytest.raises(ValueError, match="port"):
        AgentWorkflow(mode="online", port=70000)
    assert AgentWorkflow(mode="online").options.episode_timeout_s == 600.0


def test_the_session_key_is_printed_once_and_written_nowhere(tmp_path, monkeypatch, capsys):
    from types import SimpleNamespace

    from memrl.gateway.online_run import open_online_gateway

    monkeypatch.delenv("MEMRL_SESSION_KEY", raising=False)
    options = AgentWorkflow(mode="online").options
    gw = open_online_gateway(options, SimpleNamespace(trainer=SimpleNamespace(output_dir=str(tmp_path / "run"))))
    try:
        key = gw.online.session_key
        printed = capsys.readouterr().err
        assert key.startswith("sk-rl-") and printed.count(key) == 1 and f":{gw.port}/rl/episodes" in printed
        where = json.loads((tmp_path / "run" / "online.json").read_text())
        assert where["url"] == gw.url and key not in json.dumps(where)
        ok = httpx.get(f"{gw.url}/rl/status", headers={"Authorization": f"Bearer {key}"})
        assert ok.json()["waiting"] == 0
    finally:
        gw.close()
    assert not (tmp_path / "run" / "online.json").exists()  # a closed endpoint is not left for scripts to find
    monkeypatch.setenv("MEMRL_SESSION_KEY", "sk-from-env")
    gw = open_online_gateway(options, None)
    gw.close()
    assert "sk-from-env" not in capsys.readouterr().err and gw.online.session_key == "sk-from-env"
