"""``memrl data prompts memagent`` + ``slot_fill=text``: the prompt ids MemAgent's own evaluation client sends.

MemAgent's ``taskutils/memory_eval/utils/recurrent.py`` runs unmodified in a fresh process (its
HTTP session replaced by one that records each request and answers from a script); the messages it
sends are chat-templated and tokenized as an OpenAI-compatible server does, and compared with the ids
memrl's memagent workflow sends with the prompts file read from the same checkout.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from memrl.config import WorkflowConfig
from memrl.data import LongContextSample
from memrl.engines.base import SamplingParams
from memrl.models.tiny import build_hf_tokenizer
from memrl.testing import ScriptedEngine
from memrl.workflows.memagent import memagent

REPO = Path(__file__).resolve().parents[2]
ORIGINALS = Path(os.environ.get("MEMRL_SHARED_ORIGINALS", REPO.parent / "shared" / "originals"))
CLIENT = ORIGINALS / "memagent" / "taskutils" / "memory_eval"

RUN_CLIENT = """
import asyncio, json, os, sys, types
aiohttp = types.ModuleType("aiohttp")  # imported by the client's aio module; the session below replaces it
aiohttp.ClientSession, aiohttp.ClientTimeout = object, (lambda **kw: None)
sys.modules["aiohttp"] = aiohttp
client_dir, tok_dir, replies_file, item_file, out_file = sys.argv[1:]
sys.path.insert(0, client_dir)
from transformers import AutoTokenizer
from utils import recurrent
replies, sent = json.load(open(replies_file)), []

class Response:
    status = 200
    def __init__(self, content): self.content = content
    async def __aenter__(self): return self
    async def __aexit__(self, *exc): return False
    async def json(self): return {"choices": [{"message": {"content": self.content}}]}

class Session:
    async def __aenter__(self): return self
    async def __aexit__(self, *exc): return False
    def post(self, url, headers, json):
        sent.append(json)
        return Response(replies[len(sent) - 1])

async def get_async_client(): return Session()
recurrent.get_async_client = get_async_client
item = json.load(open(item_file))
answer = asyncio.run(recurrent.async_query_llm(item, "m", AutoTokenizer.from_pretrained(tok_dir)))
json.dump({"sent": sent, "answer": answer}, open(out_file, "w"))
"""

CONTEXT = ("\n  Document 1:\nCafé Zürich\nThe café in Zürich opened in 1901; the {memory} slot is literal here.\n\n"
           "Document 2:\nSnow fell on the lake for a week.\n\n ")
QUESTION = "  Where did the café open? "
REPLIES = ["<think>the section names it</think> The café opened in Zürich.", "Café: Zürich, 1901.",
           "Therefore, the answer is Zürich"]


def server_ids(tok, content: str) -> list[int]:
    """What vLLM builds from a chat request: the templated text, tokenized without added specials."""
    text = tok.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                   tokenize=False)
    return tok.encode(text, add_special_tokens=False)


def test_memagent_with_its_clients_prompts_sends_the_ids_its_client_sends(tmp_path):
    if not (CLIENT / "utils" / "recurrent.py").is_file():
        pytest.skip(f"MemAgent's evaluation client is not at {CLIENT} (set MEMRL_SHARED_ORIGINALS)")
    from memrl.cli.main import app

    prompts = tmp_path / "memagent_prompts.yaml"
    r = CliRunner().invoke(app, ["data", "prompts", "memagent", "--memagent-repo", str(ORIGINALS / "memagent"),
                                 "--out", str(prompts)])
    assert r.exit_code == 0, r.output
    assert "Therefore, the answer is" in yaml.safe_load(prompts.read_text())["final"]
    tok = build_hf_tokenizer([CONTEXT * 3, QUESTION * 3, *REPLIES, prompts.read_text()], vocab_size=480)
    tok.save_pretrained(tmp_path / "tok")
    chunk = 16
    (tmp_path / "replies.json").write_text(json.dumps(REPLIES * 20))
    (tmp_path / "item.json").write_text(json.dumps({"_id": 1, "context": CONTEXT, "input": QUESTION}))
    env = {**os.environ, "RECURRENT_CHUNK_SIZE": str(chunk), "RECURRENT_MAX_NEW": "64", "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, "-c", RUN_CLIENT, str(CLIENT), str(tmp_path / "tok"), str(tmp_path / "replies.json"),
                    str(tmp_path / "item.json"), str(tmp_path / "client.json")],
                   check=True, env=env, capture_output=True, timeout=300)
    client = json.loads((tmp_path / "client.json").read_text())

    turns = iter(REPLIES * 20)
    engine = ScriptedEngine(lambda prompt, params: tok.encode(next(turns), add_special_tokens=False)
                            + [tok.eos_token_id])
    cfg = WorkflowConfig(name="memagent", options={
        "chunk_tokens": chunk, "memory_tokens": 64, "final_tokens": 64, "prompts": str(prompts), "slot_fill": "text",
        "answer_format": "answer_is"})
    sample = LongContextSample(index=0, question=QUESTION, answers=["Zürich"], context=CONTEXT, num_docs=1)
    traj = asyncio.run(memagent(sample, engine, tok, cfg, sampling=SamplingParams(temperature=0.7, top_p=0.95)))

    assert len(client["sent"]) == len(engine.calls) > 2
    for k, (request, (ids, params)) in enumerate(zip(client["sent"], engine.calls)):
        assert list(ids) == server_ids(tok, request["messages"][0]["content"]), f"turn {k}"
        assert (params.temperature, params.top_p, params.max_new_tokens) == \
            (request["temperature"], request["top_p"], request["max_tokens"])
    assert traj.info["final_text"].strip() == client["answer"].strip()


def test_a_format_template_becomes_a_slot_template_and_an_unknown_field_is_refused():
    from memrl.data.original_prompts import as_slot_template
    from memrl.data.originals import OriginalMissing

    text = "put it in \\\\boxed{{}}.\n<problem> \n{prompt}\n</problem>\n{recalled_memory}|{memory}|{chunk}"
    assert as_slot_template(text, "f") == "put it in \\\\boxed{}.\n<problem> \n{question}\n</problem>\n{recalled}|{memory}|{chunk}"
    filled = as_slot_template(text, "f")
    for slot, value in (("question", "Q"), ("recalled", "R"), ("memory", "M"), ("chunk", "C")):
        filled = filled.replace("{" + slot + "}", value)
    assert filled == text.format(prompt="Q", recalled_memory="R", memory="M", chunk="C")  # as the client fills it
    with pytest.raises(OriginalMissing, match="field {answer} memrl has no slot for"):
        as_slot_template("say {answer}", "f")
