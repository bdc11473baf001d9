"""A small training run (rollouts + metrics) and a tool-agent eval folder, made once per session."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from memrl.config.schema import MemRLConfig
from memrl.eval.runner import check_resume, run_eval
from memrl.eval.tool_eval import run_tool_eval, task_folder
from memrl.models.resolve import load_tokenizer
from memrl.models.tiny import build_hf_tokenizer
from memrl.testing.scripted import ScriptedEngine
from memrl.train.trainer import Trainer
from memrl.workflows.common import encode_text
from tests.eval.helpers import needle_eval_dir, tokenizer_dir
from tests.train.helpers import coin_engine, config

# An episode with tool calls, a tool error and a result, as run_tool_eval writes it.
TOOL_MESSAGES = [
    {"role": "user", "content": "Member M007 wants to borrow B002.", "tool_calls": [], "error": False},
    {"role": "assistant", "content": "", "tool_calls": [{"name": "get_member_details",
                                                          "arguments": {"member_id": "M007"}}], "error": False},
    {"role": "tool", "content": "{\"member_id\": \"M007\", \"loans\": []}", "tool_calls": [], "error": False},
    {"role": "assistant", "content": "", "tool_calls": [{"name": "borrow_book",
                                                          "arguments": {"member_id": "M007", "book_id": "B002"}}],
     "error": False},
    {"role": "tool", "content": "Error: book B002 is on loan", "tool_calls": [], "error": True},
    {"role": "assistant", "content": "B002 is on loan; I placed nothing.", "tool_calls": [], "error": False},
]


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("view_run")
    tok = load_tokenizer("tiny")
    Trainer(config(tmp, trainer__total_steps=2, trainer__rollouts_per_step=3), engine=coin_engine(tok)).run()
    return tmp / "run"


@pytest.fixture(scope="session")
def tool_eval_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("view_tool") / "out"
    tok = build_hf_tokenizer(["Nothing to change here."], vocab_size=400)
    cfg = MemRLConfig.model_validate({"workflow": {"name": "tool_agent", "max_turns": 2},
                                      "env": {"domain": "library", "eval_split": "test"},
                                      "sampling": {"temperature": 1.0}})

    def reply(prompt: list[int], params: object) -> list[int]:
        return encode_text(tok, "Nothing to change here.") + [tok.convert_tokens_to_ids("<|im_end|>")]

    check_resume(out, cfg)
    asyncio.run(run_tool_eval(cfg, ScriptedEngine(reply), tok, out, 2))
    dest = out / "episodes" / task_folder("zz tools|1") / "0.json"
    dest.parent.mkdir(parents=True)
    dest.write_text(json.dumps({"task_id": "zz tools|1", "trial": 0, "reward": 0.5, "success": False,
                                "metrics": {"turns": 3.0, "tool_calls": 2.0, "response_tokens": 40.0},
                                "info": {"task_id": "zz tools|1", "ending": "agent_stop", "messages": TOOL_MESSAGES,
                                         "reward_breakdown": {"DB": 1.0, "ACTION": 0.5}}}))
    return out


@pytest.fixture(scope="session")
def qa_eval_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A long-context eval at two sizes (results.json with by_docs, accuracy.png), two repeats a question."""
    tmp = tmp_path_factory.mktemp("view_qa")
    data = needle_eval_dir(tmp / "data", n=3, count=2)
    needle_eval_dir(data, n=6, count=2)
    tok_dir = tokenizer_dir(tmp / "tok")
    tok = load_tokenizer(str(tok_dir))
    cfg = MemRLConfig.model_validate({"model": {"path": str(tok_dir)}, "workflow": {"name": "memagent"},
                                      "sampling": {"temperature": 1.0}, "eval": {"repeats": 2}})
    calls: dict[str, int] = {}

    def reply(prompt: list[int], params: object) -> list[int]:  # memory keeps the code; every other answer is wrong
        text = tok.decode(prompt)
        word = next((w for w in ("violet", "copper") if w in text), "none")
        if "secret code is" not in text:  # the final answer (its prompt holds the memory, not the document)
            calls[word] = calls.get(word, 0) + 1
            word = word if calls[word] % 2 else "none"
        return encode_text(tok, f"\\boxed{{{word}}}") + [tok.convert_tokens_to_ids("<|im_end|>")]

    out = tmp / "out"
    check_resume(out, cfg)
    asyncio.run(run_eval(cfg, ScriptedEngine(reply), tok, data, [3, 6], out))
    return out


class Dom(HTMLParser):
    """Start tags with their attributes and the page's text, enough to assert on a dumped DOM."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def having(self, cls: str, tag: str | None = None) -> list[dict[str, str]]:
        return [a for t, a in self.tags if cls in a.get("class", "").split() and (tag is None or t == tag)]


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium): browser tests skipped")
    return path


def browser(html_file: Path | None, *args: str, fragment: str = "", url: str | None = None) -> str:
    """Run headless Chromium on a file or URL after its scripts ran; returns stdout (the DOM with --dump-dom)."""
    exe = chromium()
    with tempfile.TemporaryDirectory() as profile:
        cmd = [exe, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--hide-scrollbars",
               f"--user-data-dir={profile}", "--virtual-time-budget=5000", *args,
               url or html_file.resolve().as_uri() + fragment]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout
