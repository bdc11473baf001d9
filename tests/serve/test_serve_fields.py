"""``memrl serve`` honours every request field or refuses it with a 400; tokenizing never stalls the loop."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
import torch
from fastapi.testclient import TestClient

from memrl.engines.hf import HFEngine
from memrl.serve.app import create_app
from memrl.serve.limits import ServeLimits

CHAT = [{"role": "user", "content": "Document 1: Paris is the capital of France."}]


@pytest.fixture
def client(tiny_model):
    model, tok = tiny_model
    with TestClient(create_app(HFEngine(model), tok, "tiny")) as c:
        yield c


def post(client, body, path="/v1/completions"):
    r = client.post(path, json=body)
    return r.status_code, r.json()


@pytest.mark.parametrize("path,field,value", [
    ("/v1/completions", "best_of", 2), ("/v1/completions", "echo", True), ("/v1/completions", "logit_bias", {"5": 9}),
    ("/v1/completions", "frequency_penalty", 0.5), ("/v1/completions", "suffix", "end"),
    ("/v1/completions", "max_token", 5), ("/v1/completions", "best_of", True),
    ("/v1/chat/completions", "tools", [{"type": "function", "function": {"name": "f"}}]),
    ("/v1/chat/completions", "response_format", {"type": "json_object"}),
    ("/v1/chat/completions", "presence_penalty", 1.0), ("/v1/chat/completions", "min_tokens", 2),
])
def test_fields_it_does_not_implement_are_refused_by_name(client, path, field, value):
    base = {"prompt": [5, 6], "max_tokens": 3} if path == "/v1/completions" else {"messages": CHAT, "max_tokens": 3}
    status, body = post(client, {**base, field: value}, path)
    assert status == 400 and body["error"]["param"] == field
    assert body["error"]["message"].startswith(f"{field}: not supported by memrl serve")


def test_values_that_change_nothing_are_accepted(client):
    plain = {"prompt": [5, 6, 7], "max_tokens": 6, "temperature": 0}
    noops = {"best_of": 1, "echo": False, "logit_bias": {}, "frequency_penalty": 0, "presence_penalty": 0.0,
             "suffix": None, "user": "someone"}
    s1, a = post(client, plain)
    s2, b = post(client, {**plain, **noops})
    assert s1 == s2 == 200 and a["choices"][0]["token_ids"] == b["choices"][0]["token_ids"]


@pytest.mark.parametrize("reads_text", [False, True])
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_stop_strings_cut_the_completion_before_the_first_one(tiny_model, path, reads_text):
    """The answer is the same whether the engine reads text or not; one that does stops decoding at the stop."""
    model, tok = tiny_model
    engine = HFEngine(model, tokenizer=tok if reads_text else None)
    sampled = {"max_tokens": 24, "temperature": 1.0, "seed": 7, "ignore_eos": True}  # seeded: the same text twice
    base = {"prompt": "Document 1: Paris", **sampled} if path == "/v1/completions" else {"messages": CHAT, **sampled}

    def text_of(body):
        choice = body["choices"][0]
        return choice["text"] if "text" in choice else choice["message"]["content"]

    with TestClient(create_app(engine, tok, "tiny")) as client:
        _, full = post(client, base, path)
        text, ids = text_of(full), full["choices"][0]["token_ids"]
        stop = next(text[i:i + 2] for i in range(len(text) // 2, len(text) - 1) if text[i:i + 2].strip())
        before = engine.stats.generated_tokens
        status, cut = post(client, {**base, "stop": [stop]}, path)
        decoded = engine.stats.generated_tokens - before
    kept = cut["choices"][0]["token_ids"]
    assert status == 200 and cut["choices"][0]["finish_reason"] == "stop"
    assert text_of(cut) == text[:text.find(stop)] and stop not in text_of(cut)
    assert ids[:len(kept)] == kept and stop in tok.decode(kept) and stop not in tok.decode(kept[:-1])
    assert cut["usage"]["completion_tokens"] == len(kept) < 24
    assert decoded == (len(kept) if reads_text else 24)
    assert cut["choices"][0]["stop_reason"] == stop and full["choices"][0]["stop_reason"] is None  # vLLM's field


def test_top_logprobs_are_the_models_most_likely_tokens(client, tiny_model):
    model, tok = tiny_model
    status, body = post(client, {"prompt": [5, 6, 7], "max_tokens": 3, "temperature": 0, "logprobs": 3,
                                 "return_tokens_as_token_ids": True})
    assert status == 200
    lp = body["choices"][0]["logprobs"]
    with torch.no_grad():
        first = torch.log_softmax(model(torch.tensor([[5, 6, 7]])).logits[0, -1].float(), -1)
    values, ids = first.topk(3)
    top0 = lp["top_logprobs"][0]
    assert list(top0) == [f"token_id:{i}" for i in ids.tolist()]
    assert list(top0.values()) == pytest.approx(values.tolist(), abs=1e-4)
    assert lp["token_logprobs"][0] == pytest.approx(values[0].item(), abs=1e-4)  # greedy: the first alternative
    assert len(lp["text_offset"]) == 3 and lp["text_offset"][0] == 0

    _, zero = post(client, {"prompt": [5, 6, 7], "max_tokens": 2, "temperature": 0, "logprobs": 0})
    tops = zero["choices"][0]["logprobs"]["top_logprobs"]
    assert [len(t) for t in tops] == [1, 1]  # the sampled token only

    status, chat = post(client, {"messages": CHAT, "max_tokens": 2, "temperature": 0, "logprobs": True,
                                 "top_logprobs": 2}, "/v1/chat/completions")
    content = chat["choices"][0]["logprobs"]["content"]
    assert status == 200 and [len(c["top_logprobs"]) for c in content] == [2, 2]
    assert content[0]["logprob"] == pytest.approx(content[0]["top_logprobs"][0]["logprob"])
    assert bytes(content[0]["bytes"]).decode() == content[0]["token"]


@pytest.mark.parametrize("body,message", [
    ({"messages": CHAT, "top_logprobs": 2}, "top_logprobs: needs logprobs: true"),
    ({"messages": CHAT, "logprobs": True, "top_logprobs": 21}, "top_logprobs: must be an integer between 0 and 20"),
    ({"prompt": [5], "logprobs": True}, "logprobs: must be an integer"),
    ({"prompt": [5], "stop": ["a", ""]}, "stop: stop[1] must be a non-empty string"),
    ({"prompt": [5], "stop": ["x"] * 17}, "stop: at most 16"),
    ({"prompt": [5], "n": 2, "temperature": 0}, "n: must be 1 when sampling greedily (temperature 0), got 2"),
    ({"messages": CHAT, "n": 3, "temperature": 1e-6}, "n: must be 1 when sampling greedily"),  # as vLLM
])
def test_bad_logprobs_and_stop_values_are_one_line_400s(client, body, message):
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    status, out = post(client, {**body, "max_tokens": 2}, path)
    assert status == 400 and out["error"]["message"].startswith(message)


def test_skip_special_tokens_false_keeps_special_tokens_in_the_text(client, tiny_model):
    tok = tiny_model[1]
    status, body = post(client, {"prompt": "<|im_start|>user\nhi", "max_tokens": 12, "temperature": 0,
                                 "skip_special_tokens": False, "echo": False})
    ids = body["choices"][0]["token_ids"]
    ids = ids[:-1] if body["choices"][0]["finish_reason"] == "stop" else ids
    assert status == 200 and body["choices"][0]["text"] == tok.decode(ids, skip_special_tokens=False)


class SlowTokenizer:
    """The tiny tokenizer, but encoding text takes ``delay`` seconds (a multi-megabyte prompt)."""

    def __init__(self, tok, delay: float) -> None:
        self._tok, self.delay, self.encoded = tok, delay, 0

    def __getattr__(self, name):
        return getattr(self._tok, name)

    def encode(self, text, **kwargs):
        self.encoded += 1
        time.sleep(self.delay)
        return self._tok.encode(text, **kwargs)

    def apply_chat_template(self, *args, **kwargs):
        self.encoded += 1
        return self._tok.apply_chat_template(*args, **kwargs)


def test_health_answers_while_a_prompt_is_being_tokenized(tiny_model):
    model, tok = tiny_model
    app = create_app(HFEngine(model), SlowTokenizer(tok, 1.5), "tiny", limits=ServeLimits.for_model(model))

    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=60) as c:
            t0 = time.perf_counter()  # the client shares the app's loop: a stalled loop delays the sleep too
            slow = asyncio.ensure_future(c.post("/v1/completions", json={"prompt": "hello world", "max_tokens": 2}))
            await asyncio.sleep(0.2)  # the prompt is being tokenized now
            health = await c.get("/health")
            waited = time.perf_counter() - t0 - 0.2
            return health.status_code, waited, (await slow).status_code

    health, waited, slow = asyncio.run(go())
    assert health == 200 and slow == 200 and waited < 0.5


class SlowDecoder(SlowTokenizer):
    """Decoding takes ``delay`` seconds a call: the answers of a request with many long sequences."""

    def encode(self, text, **kwargs):
        return self._tok.encode(text, **kwargs)

    def decode(self, *args, **kwargs):
        time.sleep(self.delay)
        return self._tok.decode(*args, **kwargs)


@pytest.mark.parametrize("path,body", [("/v1/completions", {"prompt": "hello world", "logprobs": 0}),
                                       ("/v1/chat/completions", {"messages": CHAT, "stream": True})])
def test_health_answers_while_an_answer_is_being_decoded(tiny_model, path, body):
    """Text, log-probs and stream spans are built in a worker thread, not on the loop every request shares."""
    model, tok = tiny_model
    app = create_app(HFEngine(model), SlowDecoder(tok, 0.4), "tiny", limits=ServeLimits.for_model(model))

    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=60) as c:
            t0 = time.perf_counter()  # the client shares the app's loop: a stalled loop delays the sleep too
            slow = asyncio.ensure_future(c.post(path, json={**body, "max_tokens": 3, "temperature": 0}))
            await asyncio.sleep(0.6)  # generated (3 tokens of a tiny model), and decoding now
            health = await c.get("/health")
            waited = time.perf_counter() - t0 - 0.6
            return health.status_code, waited, (await slow)

    health, waited, slow = asyncio.run(go())
    assert health == 200 and slow.status_code == 200 and waited < 0.3
    assert "[DONE]" in slow.text if body.get("stream") else slow.json()["choices"][0]["logprobs"] is not None


def test_text_that_cannot_fit_the_window_is_refused_without_tokenizing(tiny_model):
    model, tok = tiny_model
    slow = SlowTokenizer(tok, 0.0)
    app = create_app(HFEngine(model), slow, "tiny", limits=ServeLimits.for_model(model, max_model_len=256))
    longest = 4 * max(map(len, tok.get_vocab()))
    with TestClient(app) as c:
        r = c.post("/v1/completions", json={"prompt": "a" * (256 * longest + 1), "max_tokens": 1})
        too_long = "é" * (128 * longest + 1)  # 2 bytes a character
        chat = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": too_long}]})
        parts = c.post("/v1/chat/completions", json={"messages": [  # content as a list of parts is text too
            {"role": "user", "content": [{"type": "text", "text": too_long}]}]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert chat.status_code == 400 and chat.json()["error"]["param"] == "messages"
    assert parts.status_code == 400 and parts.json()["error"]["code"] == "context_length_exceeded"
    assert slow.encoded == 0


def test_a_huge_request_does_not_block_a_short_one(tiny_model):
    """n=4 x 100K tokens with ignore_eos decodes in the long lane; a 4-token request is answered meanwhile."""
    model, tok = tiny_model
    engine = HFEngine(model)
    app = create_app(engine, tok, "tiny", poll_s=0.02)
    huge = {"prompt": [5, 6, 7], "n": 4, "max_tokens": 100_000, "temperature": 1.0, "ignore_eos": True}

    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=60) as c:
            big = asyncio.ensure_future(c.post("/v1/completions", json=huge))
            while engine.stats.generated_tokens == 0:
                await asyncio.sleep(0.01)
            short = await c.post("/v1/completions", json={"prompt": [5, 6], "max_tokens": 4, "temperature": 0})
            big_running = not big.done()
            app.state.draining = True  # end the huge one (503) instead of decoding 400K tokens
            big_status = (await big).status_code
            await engine.idle()
            await engine.close()
            return short, big_running, big_status

    short, big_running, big_status = asyncio.run(go())
    assert short.status_code == 200 and len(short.json()["choices"][0]["token_ids"]) == 4
    assert big_running and big_status == 503 and engine.stats.generated_tokens < 50_000


def test_a_lone_surrogate_is_a_400_not_a_500(client):
    def raw(text: str, path: str = "/v1/completions"):  # JSON's \\ud800 escape: a surrogate no encoder would send
        r = client.post(path, content=text.encode(), headers={"Content-Type": "application/json"})
        return r.status_code, r.json()

    status, body = raw('{"prompt": "\\ud800 hi", "max_tokens": 2}')
    assert status == 400 and "lone surrogate" in body["error"]["message"] and body["error"]["param"] == "prompt"
    status, body = raw('{"messages": [{"role": "user", "content": "\\udfff"}], "max_tokens": 2}',
                       "/v1/chat/completions")
    assert status == 400 and body["error"]["param"] == "messages"
    status, body = post(client, {"prompt": "hi", "max_tokens": 2, "top_p": 1e-300})  # rounds to 0 in float32
    assert status == 200 and len(body["choices"][0]["token_ids"]) >= 1


def test_one_request_may_not_queue_more_sequences_than_the_limit(client):
    status, body = post(client, {"prompt": [[5, 6]] * 64, "n": 16, "max_tokens": 2})
    assert status == 400 and body["error"]["param"] == "n" and "1024 sequences in one request, at most 256" in \
        body["error"]["message"]
    status, body = post(client, {"prompt": [[5, 6]] * 16, "n": 16, "max_tokens": 1})  # 256: at the limit
    assert status == 200 and len(body["choices"]) == 256


def test_chat_logprob_bytes_are_each_tokens_own_so_they_join_into_the_text(tiny_model):
    """A byte-level token holding part of 'é' or '日' gives that part (OpenAI's ``bytes``), not U+FFFD's bytes;
    its text is vLLM's: "" while the character is unfinished, the whole character at the token finishing it."""
    from memrl.engines.base import GenerationResult
    from memrl.serve.answers import Answers

    _, tok = tiny_model
    text = "héllo 日本"
    ids = tok.encode(text, add_special_tokens=False)
    answers = Answers(tok)
    content = answers.chat_logprobs(GenerationResult(ids, [-0.5] * len(ids), "length"), 0, False)["content"]
    assert b"".join(bytes(c["bytes"]) for c in content).decode() == text
    assert "".join(c["token"] for c in content) == text and "\ufffd" not in text
    partial = [i for i, t in enumerate(ids) if tok.decode([t]).endswith("\ufffd")]
    assert partial and all(content[i]["token"] in ("", "日", "本", "é") for i in partial)
    assert bytes(answers.token_bytes(tok.eos_token_id)).decode() == tok.eos_token


def test_completion_offsets_point_into_the_text_across_split_characters(tiny_model):
    """vLLM's text_offset adds each token's text: with "" for a partial token the offsets stay in the text."""
    from memrl.engines.base import GenerationResult
    from memrl.serve.answers import Answers

    _, tok = tiny_model
    text = "日本 is 東京"
    ids = tok.encode(text, add_special_tokens=False)
    block = Answers(tok).completion_logprobs(GenerationResult(ids, [-0.5] * len(ids), "length"), 0, False)
    assert "".join(block["tokens"]) == text
    assert all(text[at:].startswith(t) for at, t in zip(block["text_offset"], block["tokens"]))
    assert block["text_offset"][-1] + len(block["tokens"][-1]) == len(text)


class BosTokenizer(SlowTokenizer):
    """The tiny tokenizer, adding a BOS to text as Llama's does (Qwen's adds nothing)."""

    def encode(self, text, add_special_tokens=True, **kwargs):
        ids = self._tok.encode(text, add_special_tokens=False, **kwargs)
        return [self._tok.eos_token_id, *ids] if add_special_tokens else ids


def test_a_text_prompt_gets_the_tokenizers_special_tokens_unless_told_not_to(tiny_model):
    """vLLM's /v1/completions defaults add_special_tokens to true: a Llama prompt starts with its BOS."""
    model, tok = tiny_model
    bos = BosTokenizer(tok, 0.0)
    plain = tok.encode("hello world", add_special_tokens=False)
    with TestClient(create_app(HFEngine(model), bos, "tiny", limits=ServeLimits.for_model(model))) as client:
        for extra, want in (({}, [tok.eos_token_id, *plain]), ({"add_special_tokens": False}, plain)):
            status, body = post(client, {"prompt": "hello world", "max_tokens": 1, "return_token_ids": True, **extra})
            assert status == 200 and body["choices"][0]["prompt_token_ids"] == want


def test_stop_reason_names_a_requested_stop_token_and_not_the_end_of_sequence(client, tiny_model):
    """vLLM's ``stop_reason``: the stop token id a request asked for, null at the end of sequence or the length."""
    from memrl.engines.base import GenerationResult
    from memrl.serve.answers import Answers

    tok = tiny_model[1]
    greedy = {"prompt": "hello world", "max_tokens": 6, "temperature": 0, "ignore_eos": True}
    _, free = post(client, greedy)
    stop_at = free["choices"][0]["token_ids"][2]
    _, stopped = post(client, {**greedy, "stop_token_ids": [stop_at]})
    choice = stopped["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == stop_at != tok.eos_token_id
    assert free["choices"][0]["stop_reason"] is None
    events = client.post("/v1/completions", json={**greedy, "stop_token_ids": [stop_at], "stream": True}).text
    last = [json.loads(line[6:]) for line in events.splitlines() if line.startswith("data: {")][-1]
    assert last["choices"][0]["stop_reason"] == stop_at  # the last chunk of the choice, as vLLM's
    ended = GenerationResult([5, tok.eos_token_id], [-1.0, -1.0], "stop")
    res, _ = Answers(tok).finished(ended, True, [], {tok.eos_token_id, stop_at})
    assert res.meta["stop_reason"] is None


def test_a_sentencepiece_tokens_text_keeps_the_leading_space_its_decoding_drops():
    """Decoded alone, a Metaspace token loses its leading space ("▁world" -> "world"); vLLM restores it, so the
    tokens of "hello world" read " hello", " world"."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from memrl.engines.base import GenerationResult
    from memrl.serve.answers import Answers

    model = Tokenizer(models.WordLevel(vocab={"\u2581hello": 0, "\u2581world": 1, "hi": 2, "[UNK]": 3},
                                       unk_token="[UNK]"))
    model.pre_tokenizer, model.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    tok = PreTrainedTokenizerFast(tokenizer_object=model, unk_token="[UNK]")
    assert tok.decode([1]) == "world"
    block = Answers(tok).completion_logprobs(GenerationResult([0, 1, 2], [-1.0] * 3, "length"), 0, False)
    assert block["tokens"] == [" hello", " world", "hi"] and block["text_offset"] == [0, 6, 12]
