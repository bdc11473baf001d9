import asyncio
import random

from memrl.config.schema import WorkflowConfig
from memrl_demo.needle import CODES, QUESTION, make_split, needle_sentence, tokenizer_corpus
from memrl_demo.run import WORKFLOW, teacher_trajectories
from memrl_demo.teacher import TeacherEngine
from memrl.engines.base import SamplingParams
from memrl.models.tiny import build_hf_tokenizer


def test_samples_hold_exactly_one_needle():
    for s in make_split(3, 50, (2, 6)):
        code = s.answers[0]
        assert s.question == QUESTION and code in CODES
        assert s.context.count("secret code") == 1 and needle_sentence(code) in s.context


def test_codes_are_single_tokens():
    tok = build_hf_tokenizer(tokenizer_corpus(), 600)
    for c in CODES:
        assert len(tok.encode(" " + c, add_special_tokens=False)) == 1


def test_teacher_reads_needles_and_forgets_at_the_given_rate():
    tok = build_hf_tokenizer(tokenizer_corpus(), 600)
    enc = lambda t: tok.encode(t, add_special_tokens=False)  # noqa: E731
    eng = TeacherEngine(tok, "tiger", final_tokens=8, forget_p=0.6, rng=random.Random(0))
    mem = SamplingParams(max_new_tokens=4)
    needle = asyncio.run(eng.generate(enc("Text: The secret code is tiger. Memory:"), mem))
    assert needle.token_ids == enc(" tiger") + [tok.eos_token_id]
    kept = sum(asyncio.run(eng.generate(enc("Memory: tiger Text: the river"), mem)).token_ids[0] == enc(" tiger")[0]
               for _ in range(400))
    assert 120 < kept < 200  # keeps it with probability 0.4
    final = asyncio.run(eng.generate(enc("Memory: tiger Answer:"), SamplingParams(max_new_tokens=8)))
    assert tok.decode(final.token_ids[:-1]) == "\\boxed{ tiger}"


def test_teacher_trajectories_score_like_its_policy():
    tok = build_hf_tokenizer(tokenizer_corpus(), 600)
    perfect = asyncio.run(teacher_trajectories(make_split(1, 20, (2, 5)), tok, forget_p=0.0, seed=0))
    assert all(t.reward == 1.0 for t in perfect)
    sloppy = asyncio.run(teacher_trajectories(make_split(1, 60, (8, 10)), tok, forget_p=0.6, seed=0))
    assert sum(t.reward for t in sloppy) / len(sloppy) < 0.5
    assert WorkflowConfig(**WORKFLOW).prompts.endswith("prompts.yaml")
