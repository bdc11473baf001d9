"""ReMemR1 with ``workflow.slot_fill=text`` (the default of ``--protocol rememr1``): the ids a server builds from
ReMemR1's evaluation client.

The reference re-does what that client (``taskutils/memory_eval/utils/rememr1.py``) does: strip context and
question, cut ``tokenizer.encode(context)`` into chunks, decode each, ``TEMPLATE.format(...)`` with the
memory (the reply less its recall, stripped) and the recalled memory, send it as one chat message. The
templates come from a stand-in checkout through ``memrl data prompts rememr1`` (their wording is memrl's;
their ``str.format`` fields, ``{prompt}``, ``{recalled_memory}`` and ``\\boxed{{}}``, are the client's).
"""

from __future__ import annotations

import asyncio

import pytest
from typer.testing import CliRunner

from memrl.config import WorkflowConfig
from memrl.data import LongContextSample
from memrl.models.tiny import build_hf_tokenizer
from memrl.testing import ScriptedEngine
from memrl.workflows.rememr1 import rememr1

# the blocks both templates share, in the client's layout (note the space after <problem>)
BLOCKS = ("<problem> \n{prompt}\n</problem>\n\n<recalled_memory>\n{recalled_memory}\n</recalled_memory>\n\n"
          "<memory>\n{memory}\n</memory>\n\n")
TEMPLATE = ("Read the section; keep a memory; <recall>query</recall> looks back.\n\n" + BLOCKS
            + "<section>\n{chunk}\n</section>\n\nUpdated memory:\n")
TEMPLATE_FINAL_BOXED = "Answer from the memory in \\boxed{{}}.\n\n" + BLOCKS + "Your answer:\n"
CLIENT_SOURCE = (f"TEMPLATE = {TEMPLATE!r}\nTEMPLATE_FINAL_BOXED = {TEMPLATE_FINAL_BOXED!r}\n"
                 "NO_MEMORY = 'No previous memory'\nNO_RECALLED_MEMORY = 'No memory was recalled.'\n")
CONTEXT = "\n Document 1:\nFilm X was directed by Jean Dupont.\nDocument 2:\nJean Dupont was born in Lyon, France.\n "
QUESTION = "  Where was the director of Film X born? "
REPLIES = ["<thinking>t</thinking><update>Film X director: Jean Dupont.</update>",
           "<update>Dupont born in Lyon.</update>\n<recall>Film X director Jean Dupont</recall>",
           "<update>Film X: Jean Dupont, born in Lyon.</update>"]


def client_ids(tok, ns: dict, chunk_tokens: int) -> list[list[int]]:
    """The ids the server receives, turn by turn, from ReMemR1's client given REPLIES (then a final answer)."""
    def sent(text: str) -> list[int]:
        templated = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=False)
        return tok.encode(templated, add_special_tokens=False)

    ids, question = tok.encode(CONTEXT.strip()), QUESTION.strip()
    memory, recalled, out = ns["NO_MEMORY"], ns["NO_RECALLED_MEMORY"], []
    memories = []
    for k, i in enumerate(range(0, len(ids), chunk_tokens)):
        out.append(sent(ns["TEMPLATE"].format(prompt=question, chunk=tok.decode(ids[i:i + chunk_tokens]),
                                              memory=memory, recalled_memory=recalled)))
        reply = REPLIES[min(k, len(REPLIES) - 1)]
        memory = reply.split("<recall>")[0].strip()  # the reply less its recall, stripped
        memories.append(memory)
        # this script's one query matches the first memory best (TF-IDF over the memories so far)
        recalled = memories[0] if "<recall>" in reply else ns["NO_RECALLED_MEMORY"]
    return out + [sent(ns["TEMPLATE_FINAL_BOXED"].format(prompt=question, memory=memory, recalled_memory=recalled))]


@pytest.mark.parametrize("slot_fill", ["text", "ids"])
def test_text_slots_send_the_ids_rememr1s_client_sends(tmp_path, slot_fill):
    from memrl.cli.main import app

    repo = tmp_path / "ReMemR1"
    (repo / "taskutils" / "memory_eval" / "utils").mkdir(parents=True)
    (repo / "taskutils" / "memory_eval" / "utils" / "rememr1.py").write_text(CLIENT_SOURCE)
    prompts = tmp_path / "rememr1_prompts.yaml"
    r = CliRunner().invoke(app, ["data", "prompts", "rememr1", "--rememr1-repo", str(repo), "--out", str(prompts)])
    assert r.exit_code == 0, r.output
    # the line to run names the released variant: the client's recall (memrl's own variant would run otherwise)
    said = " ".join(r.output.split())
    assert f"--workflow rememr1 --protocol rememr1 workflow.options.prompts={prompts}" in said
    assert said.endswith("workflow.options.rememr1_variant=released")
    assert "workflow.options.rememr1_variant=released" in prompts.read_text().splitlines()[2]
    ns: dict = {}
    exec(CLIENT_SOURCE, ns)  # the stand-in client's constants, as its TEMPLATE.format would use them

    # a GPT-2-style tokenizer that has learnt ' \n': spliced pieces differ from whole-text ids at "<problem> \n"
    tok = build_hf_tokenizer(["<problem> \n" * 50, CLIENT_SOURCE * 5, CONTEXT * 5, QUESTION * 5, *REPLIES * 5],
                             vocab_size=520)
    chunk = 12
    replies = iter([*REPLIES, *[REPLIES[-1]] * 20])
    final = "\\boxed{Lyon}"
    engine = ScriptedEngine(lambda prompt, params: tok.encode(
        next(replies) if len(engine.calls) <= n_chunks else final, add_special_tokens=False) + [tok.eos_token_id])
    n_chunks = -(-len(tok.encode(CONTEXT.strip())) // chunk)
    cfg = WorkflowConfig(name="rememr1", options={
        "chunk_tokens": chunk, "memory_tokens": 64, "final_tokens": 64, "prompts": str(prompts),
        "rememr1_variant": "released", "recall_pool": "including_current", "slot_fill": slot_fill})
    sample = LongContextSample(index=0, question=QUESTION, answers=["Lyon"], context=CONTEXT, num_docs=2)
    traj = asyncio.run(rememr1(sample, engine, tok, cfg))

    expected = client_ids(tok, ns, chunk)
    sent = [list(ids) for ids, _ in engine.calls]
    assert len(sent) == len(expected) == n_chunks + 1 > 3
    if slot_fill == "text":
        assert sent == expected
        recalled = "<recalled_memory>\n" + REPLIES[0] + "\n</recalled_memory>"  # turn 2 shows turn 0's memory
        assert recalled in tok.decode(sent[2]) and traj.metrics["sub_em"] == 1.0
    else:  # spliced ids decode to the same text but differ at the template's "<problem> \n"
        assert [tok.decode(s) for s in sent] == [tok.decode(e) for e in expected]
        assert sent != expected
