"""What ``memrl serve`` does with what a request leaves out: a chat answer's length and the model's name."""

from fastapi.testclient import TestClient

from memrl.engines.hf import HFEngine
from memrl.serve.app import create_app
from memrl.serve.limits import ServeLimits
from memrl.serve.server import served_name_for


def _client(tiny_model, **kw):
    model, tok = tiny_model
    limits = ServeLimits.for_model(model, max_model_len=64)
    return TestClient(create_app(HFEngine(model), tok, "tiny", limits=limits, **kw))


def test_chat_without_max_tokens_runs_to_the_window_completions_to_16(tiny_model):
    """vLLM's chat endpoint fills the rest of the window when neither max_tokens nor max_completion_tokens is
    set (MemAgent's serve/client.py sends max_tokens=None); a reply cut at 16 tokens lost the answer."""
    with _client(tiny_model) as client:
        for extra in ({}, {"max_tokens": None}):
            body = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0, "ignore_eos": True, **extra}
            usage = client.post("/v1/chat/completions", json=body).json()["usage"]
            assert usage["prompt_tokens"] + usage["completion_tokens"] == 64  # the window served
        capped = client.post("/v1/chat/completions", json={**body, "max_completion_tokens": 3}).json()
        assert capped["usage"]["completion_tokens"] == 3
        legacy = client.post("/v1/completions", json={"prompt": [5, 6], "temperature": 0, "ignore_eos": True})
        assert legacy.json()["usage"]["completion_tokens"] == 16  # /v1/completions keeps OpenAI's default


def test_a_folder_is_served_by_its_own_name_and_answers_to_its_path(tiny_model, tmp_path):
    folder = tmp_path / "ckpt-step-40"
    folder.mkdir()
    assert served_name_for(str(folder)) == "ckpt-step-40"
    (tmp_path / "latest").symlink_to(folder)  # a run's "latest" link: the scripts wait for the name they were given
    assert served_name_for(str(tmp_path / "latest")) == "latest"
    assert served_name_for("tiny") == "tiny" and served_name_for("Qwen/Qwen2.5-7B") == "Qwen/Qwen2.5-7B"
    with _client(tiny_model, also_named=["/models/tiny"]) as client:
        assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["tiny"]
        for name, status in (("tiny", 200), ("/models/tiny", 200), ("other", 404)):
            r = client.post("/v1/completions", json={"model": name, "prompt": [5, 6], "max_tokens": 1})
            assert r.status_code == status, r.text


def test_usage_counts_each_prompt_once_whatever_n(tiny_model):
    """OpenAI and vLLM count a prompt once however many choices it gets (``n``), and once per prompt of a
    batch; a meter reading ``prompt_tokens`` would otherwise bill it ``n`` times."""
    with _client(tiny_model) as client:
        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "temperature": 1.0, "seed": 3,
                "ignore_eos": True}
        alone = client.post("/v1/chat/completions", json=chat).json()["usage"]
        three = client.post("/v1/chat/completions", json={**chat, "n": 3}).json()["usage"]
        assert three["prompt_tokens"] == alone["prompt_tokens"] > 0
        assert three["completion_tokens"] == 6 and three["total_tokens"] == three["prompt_tokens"] + 6
        legacy = {"prompt": [[5, 6], [7, 8, 9]], "max_tokens": 2, "temperature": 1.0, "n": 2, "ignore_eos": True}
        usage = client.post("/v1/completions", json=legacy).json()["usage"]
        assert (usage["prompt_tokens"], usage["completion_tokens"]) == (5, 8)
