"""MemAgent with ``workflow.slot_fill=text``: the prompt ids a server builds from MemAgent's eval client.

The reference below re-does what that client (``taskutils/memory_eval``, ``--api recurrent``) and an
OpenAI-compatible server do together: strip the context and question, cut the context's ids into
chunks, decode each chunk, fill the template as text, chat-template the message and tokenize it whole.
The tokenizer uses the GPT-2 pre-tokenizer (as SmolLM2) and has learnt the token ``' \\n'``, so spliced
pieces differ from whole-text ids at ``"<problem> \\n{question}"``, as measured with SmolLM2.
"""

from __future__ import annotations

import asyncio

import pytest
import yaml

from memrl.config import MemRLConfig, WorkflowConfig
from memrl.data import LongContextSample
from memrl.eval.runner import with_eval_sampling
from memrl.models.tiny import build_hf_tokenizer
from memrl.testing import ScriptedEngine
from memrl.workflows.memagent import StrippedContext, memagent

PROMPTS = {
    "memory": "Read the section and update the memory.\n\n<problem> \n{question}\n</problem>\n\n<memory>\n{memory}\n"
              "</memory>\n\n<section>\n{chunk}\n</section>\n\nUpdated memory:\n",
    "final": "Answer from the memory, \"Therefore, the answer is ...\".\n\n<problem> \n{question}\n</problem>\n\n"
             "<memory>\n{memory}\n</memory>\n\nYour answer:\n",
    "no_memory": "No previous memory",
}
CONTEXT = ("\n  Document 1:\nCafé Zürich\nThe café in Zürich opened in 1901; 北京 has one too.\n\n"
           "Document 2:\nSnow\n\n ")
QUESTION = "  Where did the café open? "
REPLY = "<think>look at the section</think> The café opened in Zürich."


@pytest.fixture(scope="module")
def gpt2_style_tokenizer():
    # the context is left out, so 北京 stays bytes and a chunk can cut through a character
    corpus = ["<problem> \n" * 50, PROMPTS["memory"] * 20, PROMPTS["final"] * 20, QUESTION * 5, REPLY * 5]
    return build_hf_tokenizer(corpus, vocab_size=420)


def client_prompts(tok, chunk_tokens: int, memory_text: str) -> list[list[int]]:
    """The ids the server receives, turn by turn, when every reply's content is ``memory_text``."""
    def templated(text: str, **slots: str) -> list[int]:
        for key, value in slots.items():  # slot values hold no "{...}" placeholders here
            text = text.replace("{" + key + "}", value)
        return list(tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=True, return_dict=True)["input_ids"])

    ids = tok.encode(CONTEXT.strip())
    question, memory, out = QUESTION.strip(), PROMPTS["no_memory"], []
    for i in range(0, len(ids), chunk_tokens):
        out.append(templated(PROMPTS["memory"], question=question, memory=memory,
                             chunk=tok.decode(ids[i:i + chunk_tokens])))
        memory = memory_text
    return out + [templated(PROMPTS["final"], question=question, memory=memory)]


def run_episode(tok, tmp_path, slot_fill: str, chunk_tokens: int = 9):
    prompts = tmp_path / "prompts.yaml"
    prompts.write_text(yaml.safe_dump(PROMPTS))
    reply = tok.encode(REPLY, add_special_tokens=False) + [tok.eos_token_id]
    eng = ScriptedEngine(lambda prompt, params: reply)
    cfg = WorkflowConfig(chunk_tokens=chunk_tokens, memory_tokens=64, final_tokens=64, prompts=str(prompts),
                         slot_fill=slot_fill, answer_format="answer_is")
    sample = LongContextSample(index=0, question=QUESTION, answers=["Zürich"], context=CONTEXT, num_docs=2)
    traj = asyncio.run(memagent(sample, eng, tok, cfg))
    return [list(call[0]) for call in eng.calls], traj


def test_text_slots_send_the_ids_the_server_builds_from_the_clients_messages(gpt2_style_tokenizer, tmp_path):
    tok = gpt2_style_tokenizer
    sent, traj = run_episode(tok, tmp_path, "text")
    expected = client_prompts(tok, 9, "The café opened in Zürich.")
    assert sent == expected
    assert any("\ufffd" in tok.decode(p) for p in sent)  # a chunk cut through a character, sent as U+FFFD
    assert traj.info["memory"] == "The café opened in Zürich."  # the reply after </think>, as the client keeps it


def test_spliced_ids_differ_at_the_template_boundary(gpt2_style_tokenizer, tmp_path):
    tok = gpt2_style_tokenizer
    sent, _ = run_episode(tok, tmp_path, "ids")
    expected = client_prompts(tok, 9, "The café opened in Zürich.")
    lone = tok.encode("<problem> \n", add_special_tokens=False)
    assert tok.decode(lone[-1:]) == " \n"  # the piece alone ends in one token, which the splice keeps ...
    assert lone[-1] in sent[0] and lone[-1] not in expected[0]  # ... where the whole text has ' ', '\n'


def test_stripped_context_streams_without_outer_whitespace():
    class Lazy:
        context = ""

        def context_pieces(self):
            yield from ["  \n", " Doc", "ument 1 ", "  ", "text\n", " \n "]

    text = "".join(StrippedContext(Lazy()).context_pieces())  # type: ignore[arg-type]
    assert text == "".join(Lazy().context_pieces()).strip() == "Document 1   text"
    whole = LongContextSample(index=0, question="q", answers=["a"], context=" \n a b \n", num_docs=1)
    assert StrippedContext(whole).context == "a b" and not hasattr(StrippedContext(whole), "context_pieces")


def test_protocol_memagent_fills_memagent_slots_with_text_unless_set():
    def slot_fill(**cfg) -> str | None:
        return with_eval_sampling(MemRLConfig.model_validate(cfg)).workflow.options.get("slot_fill")

    assert slot_fill(eval={"protocol": "memagent"}) == "text"
    assert slot_fill(eval={"protocol": "memagent"}, workflow={"slot_fill": "ids"}) == "ids"
    assert slot_fill(eval={"protocol": "memrl"}) is None  # the default, ids
    assert slot_fill(eval={"protocol": "rememr1"}, workflow={"name": "rememr1"}) == "text"  # ReMemR1's client too
    assert slot_fill(eval={"protocol": "memagent"}, workflow={"name": "full_context"}) is None  # not an option there
    with pytest.raises(ValueError, match="unknown option 'workflow.options.slot_fill' of workflow 'full_context'"):
        WorkflowConfig(name="full_context", options={"slot_fill": "text"})


def test_text_slots_chunk_as_the_clients_encode_does_with_a_bos_adding_tokenizer(tmp_path):
    """Llama-3's tokenizer puts a BOS before any text it encodes; MemAgent's client encodes the context with it,
    so its first chunk starts with the BOS (sent as text) and every chunk boundary moves by one token."""
    from tokenizers.processors import TemplateProcessing

    corpus = ["<problem> \n" * 50, PROMPTS["memory"] * 20, PROMPTS["final"] * 20, QUESTION * 5, REPLY * 5]
    tok = build_hf_tokenizer(corpus, vocab_size=420)
    tok.add_special_tokens({"bos_token": "<s>"})
    tok._tokenizer.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.bos_token_id)])
    assert tok.encode("Snow")[0] == tok.bos_token_id
    sent, _ = run_episode(tok, tmp_path, "text")
    assert sent == client_prompts(tok, 9, "The café opened in Zürich.")
    assert "<section>\n<s>" in tok.decode(sent[0])
