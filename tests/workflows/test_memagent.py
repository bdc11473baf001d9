import asyncio
import math

import pytest

from memrl.config import WorkflowConfig
from memrl.data import LongContextSample
from memrl.engines.hf import HFEngine
from memrl.testing import ScriptedEngine
from memrl.workflows.common import centre_truncate, encode_text, stop_token_ids
from memrl.workflows.memagent import memagent


def sample(context: str, answers=("Paris",)) -> LongContextSample:
    return LongContextSample(index=7, question="What is the capital?", answers=list(answers), context=context,
                             num_docs=1)


def contains(seq, sub):
    return any(seq[i:i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))


def test_turns_and_token_level_memory_splice(tiny_model):
    _, tok = tiny_model
    stops = stop_token_ids(tok)
    eos = tok.eos_token_id
    turn = {"k": 0}
    final_answer = tok.encode("so \\boxed{Paris}", add_special_tokens=False)

    def reply(prompt, params):
        if params.max_new_tokens == 8:  # final turn budget
            return final_answer + [eos]
        turn["k"] += 1
        return [100 + turn["k"], 200 + turn["k"], eos]  # memory_k = [100+k, 200+k]

    eng = ScriptedEngine(reply)
    cfg = WorkflowConfig(chunk_tokens=50, memory_tokens=6, final_tokens=8, reward="em")
    text = " ".join(f"word{i}" for i in range(120))
    ctx = encode_text(tok, text)
    traj = asyncio.run(memagent(sample(text), eng, tok, cfg))
    n_chunks = math.ceil(len(ctx) / 50)
    assert traj.num_conversations == n_chunks + 1 == len(eng.calls)
    # memory turn k+1's prompt carries memory_k as the exact token ids, and chunk k+1
    for k in range(1, n_chunks):
        prompt = eng.calls[k][0]
        assert contains(prompt, [100 + k, 200 + k])
        assert contains(prompt, ctx[k * 50:(k + 1) * 50])
        assert not contains(prompt, [100 + k - 1, 200 + k - 1]) or k == 1  # memory is overwritten
    final_prompt = eng.calls[-1][0]
    assert contains(final_prompt, [100 + n_chunks, 200 + n_chunks])
    assert not contains(final_prompt, ctx[:20])  # the final turn sees no document text
    # every conversation: prompt then response with loss only on the response (stop token included)
    c0 = traj.conversations[0]
    assert c0.generated_ids() == [101, 201, eos] and c0.logprobs[-3:] == [-0.5] * 3
    assert traj.reward == 1.0 and traj.metrics["em"] == 1.0 and traj.info["answer"] == "Paris"
    assert traj.metrics["num_conversations"] == n_chunks + 1
    assert traj.metrics["memory_truncated"] == 0 and eos in stops


def test_runaway_and_malformed_output_is_counted_not_fatal(tiny_model):
    _, tok = tiny_model

    def reply(prompt, params):
        return [50] * 1000  # never stops, never boxes

    eng = ScriptedEngine(reply)
    cfg = WorkflowConfig(chunk_tokens=40, memory_tokens=5, final_tokens=7)
    traj = asyncio.run(memagent(sample("alpha beta gamma " * 30), eng, tok, cfg))
    n_mem = traj.num_conversations - 1
    assert traj.metrics["memory_truncated"] == n_mem
    assert traj.metrics["final_truncated"] == 1.0 and traj.metrics["answered"] == 0.0
    assert traj.reward == 0.0
    assert all(c.num_generated == 5 for c in traj.conversations[:-1])
    assert traj.conversations[-1].num_generated == 7


def test_empty_context_goes_straight_to_the_answer(tiny_model):
    _, tok = tiny_model
    eng = ScriptedEngine(lambda p, s: tok.encode("\\boxed{x}", add_special_tokens=False))
    traj = asyncio.run(memagent(sample("", answers=["x"]), eng, tok, WorkflowConfig(chunk_tokens=10)))
    assert traj.num_conversations == 1 and traj.reward == 1.0


def test_max_chunks_centre_truncates(tiny_model):
    _, tok = tiny_model
    eng = ScriptedEngine(lambda p, s: [5])
    text = " ".join(f"tok{i}" for i in range(300))
    ctx = encode_text(tok, text)
    cfg = WorkflowConfig(chunk_tokens=30, max_chunks=3, memory_tokens=2, final_tokens=2)
    traj = asyncio.run(memagent(sample(text), eng, tok, cfg))
    assert traj.num_conversations == 4
    kept = centre_truncate(ctx, 90)
    assert kept[:45] == ctx[:45] and kept[45:] == ctx[-45:]
    assert contains(eng.calls[2][0], kept[60:90])  # the last chunk is the document's tail
    assert traj.metrics["context_tokens_original"] == len(ctx) and traj.metrics["context_tokens"] == 90


def test_prompts_from_user_file(tiny_model, tmp_path):
    _, tok = tiny_model
    f = tmp_path / "prompts.yaml"
    f.write_text("final: 'ANSWER NOW {question} / {memory} in \\boxed{}'\n")
    eng = ScriptedEngine(lambda p, s: [5])
    asyncio.run(memagent(sample(""), eng, tok, WorkflowConfig(prompts=str(f))))
    assert "ANSWER NOW" in tok.decode(eng.calls[0][0])
    f.write_text("finale: 'x'\n")
    with pytest.raises(ValueError, match="unknown template 'finale'"):
        asyncio.run(memagent(sample(""), eng, tok, WorkflowConfig(prompts=str(f))))


def test_a_prompt_file_is_parsed_once_per_version(tmp_path, monkeypatch):
    """Workflows ask for their prompts every episode; the file is parsed again only when it changes."""
    import os

    from memrl.workflows import templates

    parses = []
    real = templates.yaml.safe_load
    monkeypatch.setattr(templates.yaml, "safe_load", lambda text: parses.append(text) or real(text))
    f = tmp_path / "prompts.yaml"
    f.write_text("final: 'AAAA'\n")
    defaults = {"final": "default", "memory": "m"}
    assert templates.load_prompts(f, defaults) == {"final": "AAAA", "memory": "m"}
    assert templates.load_prompts(str(f), defaults)["final"] == "AAAA"
    assert len(parses) == 1
    f.write_text("final: 'BBBB'\n")  # same size: the modification time tells the versions apart
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert templates.load_prompts(f, defaults)["final"] == "BBBB" and len(parses) == 2


def test_with_real_tiny_model_conversation_count(tiny_model):
    model, tok = tiny_model
    eng = HFEngine(model)
    cfg = WorkflowConfig(chunk_tokens=64, memory_tokens=4, final_tokens=4)
    texts = ["lorem ipsum dolor " * n for n in (5, 20, 40)]

    async def go():
        out = await asyncio.gather(*[memagent(sample(t), eng, tok, cfg) for t in texts])
        await eng.close()
        return out

    for text, traj in zip(texts, asyncio.run(go())):
        assert traj.num_conversations == math.ceil(len(encode_text(tok, text)) / 64) + 1
        assert all(c.num_generated <= 4 for c in traj.conversations)
