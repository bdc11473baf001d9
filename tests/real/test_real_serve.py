"""``memrl serve`` with SmolLM2 answering the official ``openai`` Python SDK."""

from __future__ import annotations

import asyncio
import select
import socket
import subprocess
import sys
import time

import pytest

from tests.real.helpers import report

pytestmark = pytest.mark.slow
openai = pytest.importorskip("openai", reason="the openai SDK is in the dev extra: pip install -e '.[dev]'")

QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]


@pytest.fixture(scope="module")
def server(smol):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "memrl.cli.main", "serve", "--model", smol, "--port", str(port),
                             "--served-model-name", "smol"], stderr=subprocess.PIPE, text=True)
    deadline, lines = time.monotonic() + 300, []
    while time.monotonic() < deadline and proc.poll() is None:
        if select.select([proc.stderr], [], [], 1.0)[0]:
            lines.append(proc.stderr.readline())
            if "listening on" in lines[-1]:
                break
    else:
        proc.kill()
        pytest.fail("memrl serve did not start:\n" + "".join(lines[-20:]))
    yield openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", timeout=900, max_retries=0)
    proc.terminate()
    proc.wait(30)


def test_chat_completion_matches_the_in_process_engine(server, smol):
    from memrl.engines.base import SamplingParams
    from memrl.engines.hf import HFEngine
    from memrl.models.resolve import load_model, load_tokenizer
    from memrl.workflows.common import stop_token_ids

    assert [m.id for m in server.models.list().data] == ["smol"]
    t0 = time.perf_counter()
    chat = server.chat.completions.create(model="smol", messages=QUESTION, max_tokens=16, temperature=0,
                                          logprobs=True, top_logprobs=2)
    seconds = time.perf_counter() - t0
    choice = chat.choices[0]
    assert choice.message.content and choice.finish_reason in ("stop", "length")
    assert len(choice.logprobs.content) == chat.usage.completion_tokens
    assert all(len(c.top_logprobs) == 2 and c.top_logprobs[0].logprob >= c.top_logprobs[1].logprob
               for c in choice.logprobs.content)
    tok = load_tokenizer(smol)
    prompt = tok.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=True, return_dict=True)
    engine = HFEngine(load_model(smol, device="cpu"))
    local = asyncio.run(engine.generate(list(prompt["input_ids"]), SamplingParams(
        max_new_tokens=16, greedy=True, stop_token_ids=stop_token_ids(tok))))
    assert choice.model_extra["token_ids"] == local.token_ids  # greedy: the same ids as memrl's own engine
    assert chat.usage.prompt_tokens == len(prompt["input_ids"])
    report("serve + openai SDK chat (16 new tokens, greedy)", **{
        "answer": repr(choice.message.content[:40]), "tokens/s": round(chat.usage.completion_tokens / seconds, 1)})


def test_completions_honour_stop_n_and_refuse_what_they_cannot_do(server):
    base = dict(model="smol", prompt="The three largest cities of France are", max_tokens=16, temperature=0)
    full = server.completions.create(**base).choices[0].text
    stop = next(full[i:i + 2] for i in range(len(full) // 2, len(full) - 1) if full[i:i + 2].strip())
    cut = server.completions.create(**base, stop=[stop]).choices[0]
    assert cut.text == full[:full.find(stop)] and cut.finish_reason == "stop"
    two = server.completions.create(**{**base, "temperature": 0.8}, n=2, seed=3, logprobs=1)
    assert len(two.choices) == 2 and all(len(c.logprobs.tokens) == len(c.logprobs.top_logprobs) for c in two.choices)
    with pytest.raises(openai.BadRequestError, match="best_of: not supported by memrl serve"):
        server.completions.create(**base, best_of=3)
    with pytest.raises(openai.BadRequestError, match="logit_bias"):
        server.chat.completions.create(model="smol", messages=QUESTION, max_tokens=4, logit_bias={"42": 5})
