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


def test_arrays_and_tensors_anchor_by_every_value() -> None:
    """str() rounds a tensor to 4 digits and elides arrays over 1000 values: two different observations
    would share a state (verl-agent compares its array anchors exactly)."""
    import numpy as np
    import torch
    a, b = torch.tensor([0.12341, 2.0]), torch.tensor([0.12344, 2.0])
    assert str(a) == str(b) and anchor(a) != anchor(b)
    x, y = np.arange(2000), np.arange(2000)
    y[1000] = -1
    assert str(x) == str(y) and anchor(x) != anchor(y) and anchor(x) == anchor(np.arange(2000))
    assert anchor(torch.tensor([1.0, 2.0])) == anchor(np.array([1.0, 2.0]))  # the values, not the library


def test_any_dict_keys_and_sets_anchor_without_collisions() -> None:
    """Tuple keys or ints beside strs cannot be sorted by json (an episode's generate raised); set members
    keep their types ({1} is not {"1"})."""
    grid, moved = {(0, 1): "wall", (2, 3): "box"}, {(0, 1): "wall", (2, 4): "box"}
    assert anchor(grid) == anchor(dict(reversed(grid.items()))) and anchor(grid) != anchor(moved)
    assert anchor({1: "a", "b": 2}) == anchor({"b": 2, 1: "a"}) != anchor({"1": "a", "b": 2})
    assert anchor({1}) != anchor({"1"}) and anchor({1, "1"}) == anchor({"1", 1})


def test_generate_keys_states_exactly(tok) -> None:
    """``ep.generate(state=...)`` keeps a string or number as written and anything else through anchor()."""
    from memrl.workflows.api import Episode
    from memrl.engines.base import SamplingParams
    import numpy as np

    async def states(*keys):
        ep = Episode(None, engine=ScriptedEngine(lambda p, s: [5, tok.eos_token_id]), tokenizer=tok,
                     sampling=SamplingParams(max_new_tokens=4))
        for k in keys:
            await ep.generate("hi", max_new_tokens=4, state=k)
        return [c.state for c in ep.conversations]

    img, other = np.zeros((40, 40)), np.zeros((40, 40))
    other[3, 4] = 1.0
    got = asyncio.run(states("room 1", 7, img, other, {"b": 1, "a": 2}, {"a": 2, "b": 1}))
    assert got[:2] == ["room 1", "7"] and got[2] != got[3] and got[4] == got[5] == anchor({"a": 2, "b": 1})


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
