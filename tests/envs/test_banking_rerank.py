"""banking_knowledge's reranked variants: τ³'s pointwise reranker (rate the retriever's hits 0-10, keep those
rated >= min_score, best first, ties in retrieval order, failed ratings and empty documents dropped), with a
rater of the user's or τ³'s own rating requests to an OpenAI-compatible server (a fake one on 127.0.0.1)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from memrl.envs.domain import load_domain
from memrl.envs.domains.banking_knowledge.rerank import OpenAIRater, RerankedRetriever, openai_rater, rating_prompt
from memrl.envs.domains.banking_knowledge.retrieval import Document, Retriever, kb_search_text
from tests.engines.test_openai_chat import FakeChatServer

CORPUS = [Document("a", "A", "alpha"), Document("b", "B", "beta"), Document("c", "C", "gamma"),
          Document("d", "D", "delta"), Document("e", "E", ""), Document("f", "F", "phi")]
RATINGS = {"alpha": 6, "beta": 9, "gamma": 4, "delta": 6, "phi": 15}


class Fixed(Retriever):
    """Returns every document, in corpus order (a stand-in for BM25's ranking)."""

    def search(self, query):
        return [(d.id, 1.0 / (i + 1)) for i, d in enumerate(self.docs)][: self.top_k]


def rate(query, document):
    """A test rater: a fixed rating per document text."""
    return RATINGS[document]


def test_rerank_keeps_the_relevant_best_first_ties_in_retrieval_order():
    seen = []

    def rater(query, document):
        seen.append((query, document))
        return rate(query, document)

    hits = RerankedRetriever(Fixed(CORPUS), rater).search("q")
    # phi clamps to 10; beta 9; alpha and delta tie at 6 and keep the retriever's order; gamma (4 < 5) goes;
    # e has no content and is never rated
    assert hits == [("f", 10.0), ("b", 9.0), ("a", 6.0), ("d", 6.0)]
    assert sorted(seen) == sorted(("q", d.content) for d in CORPUS if d.content)
    assert RerankedRetriever(Fixed(CORPUS), rate, min_score=7).search("q") == [("f", 10.0), ("b", 9.0)]
    assert RerankedRetriever(Fixed(CORPUS, top_k=2), rate).search("q") == [("b", 9.0), ("a", 6.0)]  # rates top_k only


def test_a_failed_rating_drops_the_document_and_says_so_once(capsys):
    def flaky(query, document):
        if document in ("alpha", "gamma"):
            raise RuntimeError("server said no")
        return float("nan") if document == "delta" else rate(query, document)

    assert RerankedRetriever(Fixed(CORPUS), flaky).search("q") == [("f", 10.0), ("b", 9.0)]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("banking_knowledge reranker: a rating failed, the document is dropped")
    assert RerankedRetriever(Fixed([]), rate).search("q") == []


def test_kb_search_shows_ratings_and_reranking_time():
    text = kb_search_text(RerankedRetriever(Fixed(CORPUS), rate), "q")
    lines = text.split("\n")
    assert lines[:4] == ["1. F", "   ID: f", "   Score: 10.0000", "   Content: phi"]
    assert re.fullmatch(r"\[Timing: retrieval=\d+ms, reranking=\d+ms, total=\d+ms\]", lines[-1])
    empty = kb_search_text(RerankedRetriever(Fixed(CORPUS), lambda q, d: 0), "q")
    assert re.fullmatch(r"No relevant documents found\.\n\n\[Timing: retrieval=\d+ms, reranking=\d+ms, total=\d+ms\]",
                        empty)
    # without a reranker too: τ³'s pipeline times its (empty) post-processing, > 0 ms, so it always writes it
    assert re.search(r"\[Timing: retrieval=\d+ms, reranking=0ms, total=\d+ms\]$", kb_search_text(Fixed(CORPUS), "q"))


def _clone(root: Path, prompt: str) -> Path:
    """A τ²-bench clone's layout: the rating prompt's module and the domain folder below data/."""
    source = root / "src/tau2/knowledge/postprocessors/pointwise_llm_reranker.py"
    source.parent.mkdir(parents=True)
    source.write_text(f"import os\n\nOTHER = 1\nDEFAULT_POINTWISE_PROMPT = {prompt!r}\n")
    domain = root / "data/tau2/domains/banking_knowledge"
    domain.mkdir(parents=True)
    return domain


def test_the_rating_prompt_comes_from_the_users_clone(tmp_path):
    domain = _clone(tmp_path / "tau2-bench", "Query: {}\nDocument: {}\nRate 0-10.")
    assert rating_prompt(domain) == "Query: {}\nDocument: {}\nRate 0-10."
    own = tmp_path / "prompt.txt"
    own.write_text("Q={} D={}")
    assert rating_prompt(domain, str(own)) == "Q={} D={}"
    with pytest.raises(ValueError, match=r"none is above .*: point env.data_dir into the clone"):
        rating_prompt(tmp_path / "elsewhere")
    own.write_text("only {}")
    with pytest.raises(ValueError, match="expected two {} .* found 1"):
        rating_prompt(domain, str(own))


def _score_reply(scores):
    def reply(body):
        document = body["messages"][0]["content"].split("D: ")[1]
        content = json.dumps({"relevance_score": scores[document]})
        return {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": content}}]}
    return reply


def test_openai_rater_asks_as_tau3_does(tmp_path, monkeypatch):
    domain = _clone(tmp_path / "tau2-bench", "Q: {}\nD: {}")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeChatServer(_score_reply({"alpha": 8, "beta": 12, "gamma": -1})) as server:
        opts = {"reranker_base_url": server.url, "reranker_model": "gpt-5-mini"}
        rater = openai_rater(opts, domain)
        assert isinstance(rater, OpenAIRater)
        assert [rater("which?", d) for d in ("alpha", "beta", "gamma")] == [8, 10, 0]
        first = server.requests[0]
        assert first["model"] == "gpt-5-mini" and first["reasoning_effort"] == "low"
        assert first["messages"] == [{"role": "user", "content": "Q: which?\nD: alpha"}]
        assert first["response_format"] == {"type": "json_schema", "json_schema": {  # τ³'s, byte for byte
            "name": "RelevanceScore", "strict": True, "schema": {
                "title": "RelevanceScore", "type": "object", "additionalProperties": False,
                "properties": {"relevance_score": {"title": "Relevance Score", "type": "integer"}},
                "required": ["relevance_score"]}}}
        openai_rater({**opts, "reranker_model": "qwen3"}, domain)("q", "alpha")
        assert "reasoning_effort" not in server.requests[-1]  # only gpt-5 models get it, as in τ³
    with pytest.raises(ValueError, match=r"reranker=openai calls OpenAI's API: set \$OPENAI_API_KEY"):
        openai_rater({}, domain)


@pytest.fixture
def bank(tau2_dir):
    if not (tau2_dir / "banking_knowledge" / "documents").is_dir():
        pytest.skip(f"no banking_knowledge data in {tau2_dir}")

    def make(**opts):
        return load_domain("banking_knowledge", tau2_dir, tool_options=opts)
    return make


def keyword_rater(query, document):
    """Rates a document by how many of the query's words it holds (a deterministic stand-in for an LLM)."""
    return sum(word in document.lower() for word in query.lower().split())


def test_reranked_variants_run_in_the_domain(bank):
    domain = bank(retrieval_variant="bm25_reranker_grep", reranker="tests.envs.test_banking_rerank:keyword_rater",
                  reranker_min_score=6)
    env = domain.new_env()
    assert [s["function"]["name"] for s in env.tool_schemas()][:2] == ["KB_search", "grep"]
    plain = bank(retrieval_variant="bm25_grep").new_env()
    assert env.policy == plain.policy  # τ³: the reranked variant has its base variant's prompt
    query = "debit card dispute regulation e provisional credit"
    hits = domain.kb_retriever.search(query)
    base = domain.kb_retriever.base.search(query)
    expected = sorted(((d, float(keyword_rater(query, domain.kb_retriever.by_id[d].content))) for d, _ in base),
                      key=lambda h: h[1], reverse=True)
    assert hits == [h for h in expected if h[1] >= 6] and hits
    for bad, message in (({"retrieval_variant": "bm25_reranker"}, "needs tool option reranker: openai"),
                         ({"retrieval_variant": "bm25", "reranker": "openai"}, "applies to the \\*_reranker"),
                         ({"retrieval_variant": "bm25_reranker", "reranker": "tests.envs.test_banking_rerank:rate",
                           "reranker_model": "m"}, "reranker_model applies to reranker=openai"),
                         ({"retrieval_variant": "bm25_reranker", "reranker": "openai", "reranker_min_score": "5"},
                          "reranker_min_score: expected int")):
        with pytest.raises(ValueError, match=message):
            bank(**bad)


# -- embedder=openai: τ³'s embedding requests ------------------------------------------------------------------
def _vector(text):
    """A fake embedding: counts of a few words (the fake server's model)."""
    return [float(text.lower().count(w)) + 0.01 for w in ("card", "fee", "account", "dispute")]


def _embed_reply(body):
    texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
    return {"object": "list", "model": body["model"], "usage": {"prompt_tokens": 0, "total_tokens": 0},
            "data": [{"object": "embedding", "index": i, "embedding": _vector(t)} for i, t in enumerate(texts)]}


def test_openai_embedder_asks_as_tau3_does(tmp_path, monkeypatch):
    from memrl.envs.domains.banking_knowledge.embed import api_embedder
    from memrl.envs.domains.banking_knowledge.retrieval import DenseRetriever

    monkeypatch.setenv("MEMRL_CACHE", str(tmp_path / "cache"))

    root = tmp_path / "tau2-bench"
    source = root / "src/tau2/knowledge/embedders/openrouter_embedder.py"
    source.parent.mkdir(parents=True)
    source.write_text('DEFAULT_QWEN_QUERY_INSTRUCTION = (\n    "Find the passages"\n)\n')
    domain = root / "data/tau2/domains/banking_knowledge"
    domain.mkdir(parents=True)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    docs = [Document("a", "A", "card fee"), Document("b", "B", "account dispute dispute"), Document("c", "C", "card")]
    with FakeChatServer(_embed_reply) as server:
        openai = DenseRetriever(docs, api_embedder("openai", {"embedder_base_url": server.url}, domain), top_k=2)
        assert [h[0] for h in openai.search("which card")] == ["c", "a"]
        first, query = server.requests
        assert first["_path"] == "/v1/embeddings" and first["model"] == "text-embedding-3-large"
        assert first["input"] == ["card fee", "account dispute dispute", "card"]
        assert first["encoding_format"] == "base64"  # the SDK's own choice when none is given, as in τ³'s call
        assert query["input"] == ["which card"]
        qwen = DenseRetriever(docs, api_embedder("openrouter", {"embedder_base_url": server.url}, domain))
        qwen.search("a dispute")
        documents, query = server.requests[2:]
        assert documents["model"] == "qwen/qwen3-embedding-8b" and documents["encoding_format"] == "float"
        assert documents["input"] == ["card fee", "account dispute dispute", "card"]  # documents without it
        assert query["input"] == ["Instruct: Find the passages\nQuery:a dispute"]
        with pytest.raises(ValueError, match="^Empty or missing input for key 'query': cannot generate embedding"):
            qwen.search("  ")
        asked = len(server.requests)
        again = DenseRetriever(docs, api_embedder("openai", {"embedder_base_url": server.url}, domain), top_k=2)
        assert len(server.requests) == asked  # the documents' embeddings come from the cache
        assert np.array_equal(again.matrix, openai.matrix) and again.search("which card") == openai.search("which card")
        assert len(list((tmp_path / "cache" / "embeddings").glob("*.npy"))) == 2  # one per model and endpoint
    with pytest.raises(ValueError, match=r"embedder=openai calls OpenAI's embeddings API: set \$OPENAI_API_KEY"):
        api_embedder("openai", {}, domain)
    with pytest.raises(ValueError, match="none is above"):
        api_embedder("openrouter", {"embedder_base_url": "http://127.0.0.1:9/v1"}, tmp_path / "elsewhere")


def test_embedder_options_are_checked(bank):
    for bad, message in (({"retrieval_variant": "bm25", "embedder": "openai"}, "applies to the dense retrieval"),
                         ({"retrieval_variant": "openai_embeddings", "embedder": "tests.envs.test_banking_rerank:_e",
                           "embedder_model": "m"}, "embedder_model applies to embedder=openai")):
        with pytest.raises(ValueError, match=message):
            bank(**bad)
