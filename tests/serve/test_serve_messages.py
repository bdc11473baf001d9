"""``memrl serve``'s chat messages and field types: checked as OpenAI checks them, before any model call.

Text content parts (what the openai SDK, LangChain and the Agents SDK send) reach the template as their text,
as vLLM joins them; an image part, an unknown role or a dict as content is a 400 naming it (it reached a
text-only model as the Python text of that object). A boolean or a string is not a number (``max_tokens:
true`` ran 1 token), and ``include_usage: "false"`` is not false.
"""

from fastapi.testclient import TestClient

from memrl.engines.hf import HFEngine
from memrl.serve.app import create_app
from memrl.serve.limits import ServeLimits

USER = [{"role": "user", "content": "hi"}]


def _client(tiny_model, **kw):
    model, tok = tiny_model
    return TestClient(create_app(HFEngine(model), tok, "tiny", limits=ServeLimits.for_model(model), **kw))


def test_text_parts_are_joined_as_vllm_does_and_other_content_is_refused_by_place(tiny_model):
    tok = tiny_model[1]
    parts = [{"role": "system", "content": "be brief"},
             {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    plain = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "a\nb"}]
    want = tok.apply_chat_template(plain, add_generation_prompt=True, tokenize=True)
    want = list(want["input_ids"] if hasattr(want, "keys") else want)
    bad = [
        ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}],
         "messages[0].content[0]"),
        ([{"role": "user", "content": {"a": 1}}], "messages[0].content"),
        ([{"role": "user", "content": 5}], "messages[0].content"),
        ([{"role": "wizard", "content": "hi"}], "messages[0].role"),
        ([{}], "messages[0].role"),
        ([], "messages"),
    ]
    with _client(tiny_model) as client:
        ok = client.post("/v1/chat/completions", json={"messages": parts, "max_tokens": 1, "return_token_ids": True})
        answers = [client.post("/v1/chat/completions", json={"messages": m, "max_tokens": 1}) for m, _ in bad]
    assert ok.status_code == 200 and ok.json()["choices"][0]["prompt_token_ids"] == want
    assert [(r.status_code, r.json()["error"]["param"]) for r in answers] == [(400, where) for _, where in bad]


def test_booleans_and_strings_are_not_numbers_nor_flags(tiny_model):
    bodies = [("max_tokens", True), ("temperature", True), ("n", "2"), ("max_tokens", "3"), ("stream", "yes"),
              ("ignore_eos", 1), ("seed", False), ("top_p", "0.5")]
    with _client(tiny_model) as client:
        answers = [client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2, field: value})
                   for field, value in bodies]
        usage = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2, "stream": True,
                                                     "stream_options": {"include_usage": "false"}})
        whole = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2.0, "temperature": 0})
    assert [(r.status_code, r.json()["error"]["param"]) for r in answers] == [(400, f) for f, _ in bodies]
    assert usage.status_code == 400 and usage.json()["error"]["param"] == "stream_options.include_usage"
    assert whole.status_code == 200 and whole.json()["usage"]["completion_tokens"] == 2  # 2.0 is 2, as pydantic


def test_a_keyless_request_with_broken_json_is_told_about_its_key(tiny_model):
    """OpenAI and vLLM's --api-key answer 401 whatever the body; the body was parsed first, so it got a 400."""
    with _client(tiny_model, api_key="sekrit") as client:
        keyless = client.post("/v1/chat/completions", content=b"{bad", headers={"content-type": "application/json"})
        keyed = client.post("/v1/chat/completions", content=b"{bad",
                            headers={"content-type": "application/json", "authorization": "Bearer sekrit"})
    assert keyless.status_code == 401 and keyless.json()["error"]["code"] == "invalid_api_key"
    assert keyed.status_code == 400 and "JSON" in keyed.json()["error"]["message"]


def test_the_largest_int64_seed_is_a_seed(tiny_model):
    top = 2**63 - 1
    with _client(tiny_model) as client:
        ok = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 1, "seed": top})
        two = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 1, "seed": top - 1, "n": 2})
        over = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 1, "seed": top, "n": 2})
    assert ok.status_code == 200 and two.status_code == 200, (ok.text, two.text)
    assert over.status_code == 400 and over.json()["error"]["param"] == "seed"
