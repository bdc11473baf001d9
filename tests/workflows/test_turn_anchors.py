"""The built-in workflows declare each turn's anchor state (what gigpo compares turns by)."""

from __future__ import annotations

import asyncio
import hashlib

from memrl.config import WorkflowConfig
from memrl.data import LongContextSample
from memrl.testing import ScriptedEngine
from memrl.workflows import anchor
from memrl.workflows.memagent import memagent
from tests.workflows.test_tool_agent import Script, run, sample, tok  # noqa: F401  (tok is a fixture)


def test_anchor_is_a_stable_hash_of_its_parts() -> None:
    assert anchor("q", 0, "mem") == hashlib.sha1(b'["q", 0, "mem"]').hexdigest()[:16]  # no per-process salt
    assert len(anchor("q")) == 16 and anchor("q", 0, "mem") != anchor("q", 1, "mem")
    assert anchor({"b": 1, "a": 2}) == anchor({"a": 2, "b": 1})  # messages hash by content, not key order


def test_memagent_anchors_are_question_chunk_and_memory(tiny_model) -> None:
    _, tok = tiny_model
    sample = LongContextSample(index=1, question="Who?", answers=["x"], context=" ".join(["w"] * 60), num_docs=1)
    cfg = WorkflowConfig(chunk_tokens=20, memory_tokens=4, final_tokens=4)

    def episode(memories: list[int]):
        it = iter(memories)
        return asyncio.run(memagent(sample, ScriptedEngine(lambda p, s: [next(it, 5), tok.eos_token_id]), tok, cfg))

    a, b = episode([7, 7, 8, 9]), episode([7, 6, 8, 9])
    states_a = [c.state for c in a.conversations]
    states_b = [c.state for c in b.conversations]
    assert all(states_a) and len(states_a) == len(set(states_a)) == 4  # 3 chunks + the final turn
    assert states_a[0] == states_b[0] == anchor("Who?", 0, "Nothing yet.")  # same question, chunk, memory
    assert states_a[1] == states_b[1]  # both wrote the same memory after chunk 0
    assert states_a[2] != states_b[2]  # different memory after chunk 1
    assert states_a[1] == anchor("Who?", 1, tok.decode([7]))


def test_tool_agent_anchor_is_the_database_and_history_length(tok) -> None:  # noqa: F811
    s = sample("return_")
    first = run(s, Script(tok, ["The return is recorded."]), tok)
    again = run(s, Script(tok, ["Something else."]), tok)
    state = first.conversations[0].state
    assert state is not None and state == again.conversations[0].state  # same task, same start
