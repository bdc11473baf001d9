"""Replay of MemAgent's own evaluation client talking to ``memrl serve`` (SmolLM2-135M-Instruct, greedy).

``memagent_client_exchange.json`` holds every request that client sent (chat messages), the prompt ids
the server built from them, and the server's replies, captured through a logging proxy (see its
``about``). memrl's MemAgent workflow is replayed against those replies with the settings the client
used: under ``slot_fill=text`` (the default of ``--protocol memagent``) it must send the same prompt ids
on every turn, end with the same final text and get the same scores. Needs only SmolLM2's tokenizer
(``make smol``), neither the original code nor the model weights.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml

from memrl.config import WorkflowConfig
from memrl.data import LongContextSample
from memrl.engines.base import GenerationResult
from memrl.rewards.published import score_protocol
from memrl.workflows.memagent import memagent

FIXTURE = Path(__file__).with_name("memagent_client_exchange.json")


@pytest.fixture(scope="module")
def smol_tokenizer():
    from memrl.models.smol import smollm2_tokenizer

    try:
        return smollm2_tokenizer()
    except (FileNotFoundError, ImportError) as exc:
        pytest.skip(f"SmolLM2's tokenizer is not available ({exc}); run `make smol`")


class Replay:
    """An engine that answers each prompt with the reply the server gave the client for the same ids."""

    def __init__(self, exchange: list[dict]) -> None:
        self.replies = {tuple(turn["prompt_ids"]): turn["response"] for turn in exchange}
        self.sent: list[list[int]] = []

    async def generate(self, prompt_ids, params):
        self.sent.append(list(prompt_ids))
        reply = self.replies.get(tuple(prompt_ids))
        if reply is None:  # a prompt the client never sent: answer nothing, the test then fails on the ids
            return GenerationResult([], [], "stop")
        assert params.max_new_tokens == 48 and params.is_greedy
        return GenerationResult(list(reply["token_ids"]), [0.0] * len(reply["token_ids"]), reply["finish_reason"])


def replay(tok, tmp_path, slot_fill: str):
    fx = json.loads(FIXTURE.read_text(encoding="utf-8"))
    prompts = tmp_path / "memagent_eval_prompts.yaml"
    prompts.write_text(yaml.safe_dump(fx["prompts"], allow_unicode=True), encoding="utf-8")
    s = fx["settings"]
    cfg = WorkflowConfig(chunk_tokens=s["RECURRENT_CHUNK_SIZE"],
                         max_chunks=s["RECURRENT_MAX_CONTEXT_LEN"] // s["RECURRENT_CHUNK_SIZE"],
                         memory_tokens=s["RECURRENT_MAX_NEW"], final_tokens=s["RECURRENT_MAX_NEW"],
                         prompts=str(prompts), slot_fill=slot_fill, answer_format="answer_is")
    engine = Replay(fx["exchange"])
    finals = {}
    for row in fx["samples"]:
        sample = LongContextSample(index=row["index"], question=row["input"], answers=row["answers"],
                                   context=row["context"], num_docs=row["num_docs"])
        finals[row["index"]] = asyncio.run(memagent(sample, engine, tok, cfg)).info["final_text"]
    return fx, engine.sent, finals


def test_memrl_sends_the_clients_prompt_ids_and_scores_its_answers_alike(smol_tokenizer, tmp_path):
    fx, sent, finals = replay(smol_tokenizer, tmp_path, "text")
    captured = [turn["prompt_ids"] for turn in fx["exchange"]]
    assert sorted(sent) == sorted(captured)  # every turn, token for token (the client ran both samples at once)
    for row in fx["scores"]:
        gold = next(s["answers"] for s in fx["samples"] if s["index"] == row["index"])
        final = finals[row["index"]]
        assert final.strip() == row["response"]
        scores = score_protocol(final, gold, "memagent", "answer_is")
        assert (scores["sub_em"], scores["em"], scores["f1"]) == (row["sub_em"], row["em"], row["f1"])


def test_spliced_ids_are_not_what_the_client_sends(smol_tokenizer, tmp_path):
    """The measured difference: spliced pieces keep ``' \\n'`` whole after ``<problem>``; the server splits it."""
    fx, sent, _ = replay(smol_tokenizer, tmp_path, "ids")
    captured = [turn["prompt_ids"] for turn in fx["exchange"]]
    assert not {tuple(p) for p in captured} & {tuple(p) for p in sent}
    lone = smol_tokenizer.encode("<problem> \n", add_special_tokens=False)
    assert smol_tokenizer.decode(lone[-1:]) == " \n" and lone[-1] in sent[0]
    assert all(lone[-1] not in p for p in captured)
