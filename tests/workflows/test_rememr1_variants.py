"""ReMemR1 variants: the recall slot (both), the released prompts, recall pool and state reward."""

import asyncio
import math

import pytest

from memrl.config import WorkflowConfig
from memrl.data import LongContextSample
from memrl.testing import ScriptedEngine
from memrl.workflows.common import encode_text
from memrl.workflows.rememr1 import RELEASED_PROMPTS, released_coverage, released_state_reward, rememr1

FINAL_TOKENS = 9


def contains(seq, sub):
    return any(seq[i:i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))


def occurrences(seq, sub):
    return sum(seq[i:i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))


def run(tok, variant, script, turns, pool="previous"):
    """One episode of ``turns`` memory turns answering from ``script``, then ``\\boxed{Paris}``."""
    enc = lambda t: tok.encode(t, add_special_tokens=False)  # noqa: E731
    calls = {"k": 0}

    def reply(prompt, params):
        if params.max_new_tokens == FINAL_TOKENS:
            return enc("\\boxed{Paris}") + [tok.eos_token_id]
        calls["k"] += 1
        return enc(script[calls["k"] - 1]) + [tok.eos_token_id]

    eng = ScriptedEngine(reply)
    text = " ".join(f"w{i}" for i in range(200))
    chunk = math.ceil(len(encode_text(tok, text)) / turns)
    cfg = WorkflowConfig(name="rememr1", chunk_tokens=chunk, memory_tokens=200, final_tokens=FINAL_TOKENS,
                         reward="em", rememr1_variant=variant, recall_pool=pool)
    sample = LongContextSample(index=0, question="What is the capital?", answers=["Paris"], context=text,
                               num_docs=1)
    traj = asyncio.run(rememr1(sample, eng, tok, cfg))
    assert traj.num_conversations == turns + 1
    return traj, [c[0] for c in eng.calls]


# Turn 1 writes the answer, turn 2 drops it, turn 3 asks for it back, turn 4 asks nothing. The query
# starts with a space because the tiny tokenizer splits "capital" at the start of a text into other
# pieces ('cap', 'ital') than after a space ('Ġcapital'), and the released recall matches pieces.
SCRIPT = [
    "<thinking>a</thinking><update>Paris is the capital</update>",
    "<thinking>b</thinking><update>unrelated stuff</update>",
    "<thinking>c</thinking><update>more stuff</update><recall> the capital</recall>",
    "<thinking>d</thinking><update>last stuff</update>",
]


@pytest.mark.parametrize("variant,placeholder", [("memrl", "Nothing recalled."),
                                                 ("released", "Nothing was recalled.")])
def test_recall_slot_is_rewritten_every_turn(tiny_model, variant, placeholder):
    _, tok = tiny_model
    enc = lambda t: tok.encode(t, add_special_tokens=False)  # noqa: E731
    traj, prompts = run(tok, variant, SCRIPT, 4)
    first = enc("<thinking>a</thinking><update>Paris is the capital</update>")
    empty = enc(placeholder)
    assert contains(prompts[2], empty) and not contains(prompts[2], first)  # turn 2 made no query
    assert contains(prompts[3], first) and not contains(prompts[3], empty)  # turn 3's query found memory 1
    assert contains(prompts[4], empty) and not contains(prompts[4], first)  # turn 4 made none: final prompt
    assert traj.metrics["recalls"] == 1 and traj.metrics["recall_hits"] == 1
    assert traj.info["recalled"] == "" and traj.reward == 1.0


def test_released_recall_has_no_threshold(tiny_model):
    _, tok = tiny_model
    enc = lambda t: tok.encode(t, add_special_tokens=False)  # noqa: E731
    script = SCRIPT[:2] + [SCRIPT[2].replace(" the capital", "capital")] + SCRIPT[3:]
    # 'cap' + 'ital' share no piece with either earlier memory: every score is 0, and the released
    # recall still returns one, the most recent (memory 2); memrl's word index finds memory 1
    second = enc("<thinking>b</thinking><update>unrelated stuff</update>")
    traj, prompts = run(tok, "released", script, 4)
    assert traj.metrics["recall_hits"] == 1 and occurrences(prompts[3], second) == 1
    memrl, prompts = run(tok, "memrl", [t.replace("thinking>", "think>") for t in script], 4)
    assert contains(prompts[3], enc("<think>a</think><update>Paris is the capital</update>"))


def test_state_rewards_by_hand(tiny_model):
    _, tok = tiny_model
    released, _ = run(tok, "released", SCRIPT, 4)
    # released: format + (coverage of the update - coverage of a one-line <memory> block in the prompt,
    # which its layout never has, so 0) + max(0, coverage of this turn's recall - coverage of the prompt)
    # t1: 1 + (1 - 0) + max(0, 0 - 0) = 2      t2: 1 + (0 - 0) + 0 = 1 (dropping Paris costs nothing)
    # t3: 1 + (0 - 0) + max(0, 1 - 0) = 2 (the prompt shows memory 2, no Paris; the recall brings it)
    # t4: 1 + (0 - 0) + max(0, 0 - 1) = 1 (its prompt holds the recalled memory)   final: one box = 1
    assert [c.reward for c in released.conversations] == [2.0, 1.0, 2.0, 1.0, 1.0]
    memrl, _ = run(tok, "memrl", SCRIPT, 4)
    # memrl: format + coverage gain of the whole memory + max(0, what the recall adds to the new memory)
    # t1: 1 + 1 + 0 = 2   t2: 1 + (0 - 1) + 0 = 0   t3: 1 + 0 + (1 - 0) = 2   t4: 1 + 0 + 0 = 1   final 1
    assert [c.reward for c in memrl.conversations] == [2.0, 0.0, 2.0, 1.0, 1.0]


def test_recall_pool_previous_or_including_current(tiny_model):
    _, tok = tiny_model
    enc = lambda t: tok.encode(t, add_special_tokens=False)  # noqa: E731
    script = ["<thinking>a</thinking><update>Paris is the capital</update><recall>capital</recall>",
              "<thinking>b</thinking><update>x</update>"]
    kept = enc("<thinking>a</thinking><update>Paris is the capital</update>")  # recall section cut, stripped
    prev, prompts = run(tok, "released", script, 2, pool="previous")
    # the first turn has no earlier memory to search: turn 2 shows the memory once and the placeholder
    assert prev.metrics["recalls"] == 1 and prev.metrics["recall_hits"] == 0
    assert occurrences(prompts[1], kept) == 1 and contains(prompts[1], enc("Nothing was recalled."))
    assert prev.conversations[0].reward == 2.0  # 1 + (1 - 0) + 0
    cur, prompts = run(tok, "released", script, 2, pool="including_current")
    assert cur.metrics["recall_hits"] == 1 and occurrences(prompts[1], kept) == 2  # memory and recalled memory
    assert cur.conversations[0].reward == 3.0  # 1 + (1 - 0) + max(0, 1 - 0): it recalled its own memory


def test_released_prompts_use_its_tags(tiny_model):
    _, tok = tiny_model
    for tag in ("<thinking>", "<update>", "<recall>", "<problem>", "<memory>", "<section>", "<recalled_memory>"):
        assert tag in RELEASED_PROMPTS["memory"]
    assert "\\boxed{}" in RELEASED_PROMPTS["final"]
    _, prompts = run(tok, "released", SCRIPT[:1], 1)
    assert "<thinking>" in tok.decode(prompts[0]) and "<think>" not in tok.decode(prompts[0])


def test_released_coverage_by_hand():
    assert released_coverage("the Eiffel Tower", ["Eiffel Tower"]) == 1.0
    assert released_coverage("Eiffel tower", ["Eiffel Tower"]) == 0.5  # case-sensitive: 'Tower' misses
    assert released_coverage("Parisian", ["Paris"]) == 1.0  # raw substring
    assert released_coverage("Paris", ["Paris", "City of Light"]) == 0.5  # (1 + 0) / 2: mean, not max
    assert released_coverage("Paris", ["Paris", " "]) == 0.5  # an empty gold still counts in the mean


def test_released_state_reward_by_hand():
    golds = ["New York"]
    prompt = "<memory>\nNew\n</memory>\n<section>York</section>"
    # format 1; update 'New York' -> 1, previous block spans lines -> '' -> 0; recall 'New' 0.5 - prompt 1 -> 0
    assert released_state_reward(prompt, "<update>New York</update>", "New", golds, False) == 2.0
    # a one-line <memory> block is read: 1 + (0.5 - 0.5) + max(0, 1 - 0.5)
    assert released_state_reward("<memory>New</memory>", "<update>New</update>", "New York", golds, False) == 1.5
    # the recall term is what the recalled text adds to the prompt (ReMemR1 6d8401f): 'Obama' joins the prompt's
    # 'Barack' -> 1 - 0.5; the text alone ('the president Obama' 0.5 - prompt 0.5) would give 0. 1 + 0.5 + 0.5
    obama = ["Barack Obama"]
    assert released_state_reward("<memory>Barack</memory>", "<update>Barack Obama</update>", "the president Obama",
                                 obama, False) == 2.0
    # an update spanning lines is not one (format 0, update text ''); two updates are not one either
    assert released_state_reward("", "<update>New\nYork</update>", "", golds, False) == 0.0
    assert released_state_reward("", "<update>a</update><update>b</update>", "", golds, False) == 0.0
    assert released_state_reward("", "so \\boxed{New York}", "", golds, True) == 1.0
    assert released_state_reward("", "\\boxed{a}\n\\boxed{b}", "", golds, True) == 0.0
    assert released_state_reward("", "\\boxed{a} or \\boxed{b}", "", golds, True) == 1.0  # greedy: one match


@pytest.mark.parametrize("pool", ["previous", "including_current"])
def test_released_episode_with_a_model(tiny_model, pool):
    from memrl.engines.hf import HFEngine

    model, tok = tiny_model
    text = " ".join(f"w{i}" for i in range(60))
    sample = LongContextSample(index=0, question="q?", answers=["w5"], context=text, num_docs=1)
    cfg = WorkflowConfig(name="rememr1", rememr1_variant="released", recall_pool=pool,
                         chunk_tokens=math.ceil(len(encode_text(tok, text)) / 2), memory_tokens=8, final_tokens=4)

    async def go():
        eng = HFEngine(model)
        try:
            return await rememr1(sample, eng, tok, cfg)
        finally:
            await eng.close()

    traj = asyncio.run(go())
    assert traj.num_conversations == 3
    assert all(c.num_generated > 0 and math.isfinite(c.reward) for c in traj.conversations)


def test_released_variant_strips_question_and_context_as_its_client_does(tiny_model):
    _, tok = tiny_model
    eng = ScriptedEngine(lambda prompt, params: tok.encode("\\boxed{Paris}", add_special_tokens=False)
                         + [tok.eos_token_id])
    prompts = {}
    for variant in ("released", "memrl"):
        cfg = WorkflowConfig(name="rememr1", chunk_tokens=500, memory_tokens=20, final_tokens=FINAL_TOKENS,
                             reward="em", rememr1_variant=variant)
        sample = LongContextSample(index=0, question=" Q: capital? ", answers=["Paris"], context="city.\n",
                                   num_docs=1)
        eng.calls.clear()
        asyncio.run(rememr1(sample, eng, tok, cfg))
        prompts[variant] = tok.decode(eng.calls[0][0])
    assert "Q: capital?" in prompts["released"] and " Q: capital? " not in prompts["released"]
    assert "city.\n\n" not in prompts["released"] and "city.\n" in prompts["released"]
    assert " Q: capital? " in prompts["memrl"]  # memrl's own variant reads the sample as it is
