import asyncio
import math

from memrl.config import WorkflowConfig
from memrl.data import LongContextSample
from memrl.engines.hf import HFEngine
from memrl.testing import ScriptedEngine
from memrl.workflows.common import encode_text
from memrl.workflows.rememr1 import cut_span, gold_coverage, rememr1


def contains(seq, sub):
    return any(seq[i:i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))


def test_budgets_default_to_rememr1s():
    cfg = WorkflowConfig(name="rememr1")
    assert (cfg.memory_tokens, cfg.final_tokens, cfg.question_tokens) == (2048, 2048, 2048)
    assert WorkflowConfig(name="rememr1", memory_tokens=64).memory_tokens == 64
    assert WorkflowConfig().memory_tokens == 1024


def test_gold_coverage():
    assert gold_coverage("The Eiffel tower is tall", ["Eiffel Tower"]) == 1.0
    assert gold_coverage("eiffel", ["Eiffel Tower"]) == 0.5
    assert gold_coverage("nothing", ["Eiffel Tower", "x"]) == 0.0


def test_cut_span_keeps_sampled_tokens(tiny_model):
    _, tok = tiny_model
    ids = tok.encode("<update>keep this</update><recall>find me</recall> tail", add_special_tokens=False)
    text = tok.decode(ids)
    s, e = text.index("<recall>"), text.index("</recall>") + len("</recall>")
    kept = cut_span(tok, ids, s, e)
    assert tok.decode(kept) == "<update>keep this</update> tail"
    assert contains(ids, kept[:5]) and kept[-3:] == ids[-3:]


def test_recall_retrieves_earlier_memory_and_rewards(tiny_model):
    _, tok = tiny_model
    enc = lambda t: tok.encode(t, add_special_tokens=False)  # noqa: E731
    script = [
        "<think>a</think><update>Paris is the capital</update>",
        "<think>b</think><update>unrelated stuff</update><recall>capital</recall>",
        "<think>c</think><update>more stuff</update>",
    ]
    calls = {"k": 0}

    def reply(prompt, params):
        if params.max_new_tokens == 9:
            return enc("\\boxed{Paris}") + [tok.eos_token_id]
        calls["k"] += 1
        return enc(script[calls["k"] - 1]) + [tok.eos_token_id]

    eng = ScriptedEngine(reply)
    text = " ".join(f"w{i}" for i in range(200))
    chunk = math.ceil(len(encode_text(tok, text)) / 3)
    cfg = WorkflowConfig(name="rememr1", chunk_tokens=chunk, memory_tokens=200, final_tokens=9, reward="em")
    sample = LongContextSample(index=0, question="What is the capital?", answers=["Paris"], context=text, num_docs=1)
    traj = asyncio.run(rememr1(sample, eng, tok, cfg))
    assert traj.num_conversations == 4 and traj.reward == 1.0
    first_memory = enc("<think>a</think><update>Paris is the capital</update>")
    # turn 3's prompt shows memory 2 without its recall section, and recalls memory 1
    p3 = eng.calls[2][0]
    assert contains(p3, enc("<update>unrelated stuff</update>"))
    assert not contains(p3, enc("<recall>capital</recall>"))
    assert contains(p3, first_memory)
    # turn 3 made no query, so the final prompt shows the placeholder, not turn 2's stale recall
    assert not contains(eng.calls[3][0], first_memory)
    assert contains(eng.calls[3][0], enc("Nothing recalled."))
    assert traj.metrics["recalls"] == 1 and traj.metrics["recall_hits"] == 1
    r = [c.reward for c in traj.conversations]
    assert r[0] == 2.0  # format 1 + coverage gain 1 (paris now in memory)
    assert r[1] == 1.0  # format 1 - coverage loss 1 + recall gain 1
    assert r[2] == 1.0 and r[3] == 1.0  # format only; final: exactly one box


def test_malformed_turns_are_counted(tiny_model):
    _, tok = tiny_model
    eng = ScriptedEngine(lambda p, s: tok.encode("no tags at all", add_special_tokens=False))
    cfg = WorkflowConfig(name="rememr1", chunk_tokens=20, memory_tokens=30, final_tokens=5)
    sample = LongContextSample(index=0, question="q?", answers=["a"], context="x y z " * 20, num_docs=1)
    traj = asyncio.run(rememr1(sample, eng, tok, cfg))
    n = traj.num_conversations - 1
    assert traj.metrics["no_update"] == n and traj.metrics["answered"] == 0.0
    assert all(c.reward == 0.0 for c in traj.conversations)


def test_full_context_truncates_to_window(tiny_model):
    model, tok = tiny_model
    from memrl.workflows.full_context import full_context

    text = " ".join(f"w{i}" for i in range(400))
    sample = LongContextSample(index=0, question="q?", answers=["a"], context=text, num_docs=1)
    eng = HFEngine(model)
    cfg = WorkflowConfig(name="full_context", max_context_tokens=300, final_tokens=4)

    async def go():
        t = await full_context(sample, eng, tok, cfg)
        await eng.close()
        return t

    traj = asyncio.run(go())
    assert traj.num_conversations == 1
    conv = traj.conversations[0]
    assert conv.num_tokens <= 300 and conv.num_generated <= 4
    assert traj.metrics["context_truncated"] == 1.0
