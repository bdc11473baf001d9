"""memrl's ``embedder=openai`` dense search beside τ³'s own embedding pipeline, against one fake embeddings server.

For OpenAI's flow (``openai_embeddings``, ``alltools``) and OpenRouter's (``qwen_embeddings``,
``alltools-qwen``: queries carry Qwen's instruction), τ³'s ``EmbeddingIndexer`` + ``EmbeddingEncoder`` +
``CosineRetriever`` and memrl's ``DenseRetriever`` embed the same 698 documents through a fake
``/v1/embeddings`` on 127.0.0.1 (a vector from a hash of each text), then answer the same queries.
Printed: whether the request bodies are equal and whether the top-10 lists (ids and scores) are equal.

    pip install loguru pandas toml addict deepdiff python-dotenv litellm   # what importing τ³'s modules needs
    PYTHONPATH=~/tau2-bench/src python bench/tau3_dense_parity.py --tau2 ~/tau2-bench --data ../shared/tau2
"""

from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
from pathlib import Path

from fake_openai import FakeServer

QUERIES = ["debit card dispute regulation e provisional credit", "open business checking account eligibility",
           "wire transfer limits", "lost card replacement fee", "zelle"]


def vector(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [b / 255 - 0.5 for b in digest[:16]]


def embed(body: dict) -> tuple[int, dict]:
    """The fake server's answer: one vector per input text."""
    texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
    return 200, {"object": "list", "model": body["model"], "usage": {"prompt_tokens": 0, "total_tokens": 0},
                 "data": [{"object": "embedding", "index": i, "embedding": vector(t)} for i, t in enumerate(texts)]}


def tau3_pipeline(provider: str, model: str, docs: list) -> object:
    from tau2.knowledge.pipeline import RetrievalPipeline

    params = {"embedder_type": provider, "embedder_params": {"model": model}}
    pipeline = RetrievalPipeline({"document_preprocessors": [{"type": "embedding_indexer",
                                                              "params": {**params, "use_cache": False}}],
                                  "input_preprocessors": [{"type": "embedding_encoder", "params": params}],
                                  "retriever": {"type": "cosine", "params": {"top_k": 10}}, "postprocessors": []})
    pipeline.index_documents([{"id": d.id, "text": d.content, "title": d.title} for d in docs])
    return pipeline


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tau2", type=Path, required=True, help="a τ²-bench clone (its src/ on PYTHONPATH)")
    ap.add_argument("--data", type=Path, required=True, help="a folder holding banking_knowledge/documents")
    args = ap.parse_args()
    server = FakeServer(embed)
    url, requests = server.url, server.requests
    os.environ.update(OPENAI_BASE_URL=url, OPENAI_API_KEY="sk-local", OPENROUTER_API_KEY="sk-local",
                      MEMRL_CACHE=tempfile.mkdtemp())  # memrl embeds the documents here, not from a cache
    import openai
    from tau2.knowledge import embeddings_cache
    from tau2.knowledge.embedders import openrouter_embedder

    embeddings_cache.get_cached_query_embedding = lambda *a, **k: None  # every query reaches the server
    embeddings_cache.cache_query_embedding = lambda *a, **k: None
    openrouter_embedder.OpenAI = lambda **kw: openai.OpenAI(**{**kw, "base_url": url})  # its URL is fixed
    from memrl.envs.domains.banking_knowledge.embed import api_embedder
    from memrl.envs.domains.banking_knowledge.retrieval import DenseRetriever, load_documents

    docs = load_documents(args.data / "banking_knowledge" / "documents")
    domain_dir = args.tau2 / "data/tau2/domains/banking_knowledge"
    for provider, model in (("openai", "text-embedding-3-large"), ("openrouter", "qwen/qwen3-embedding-8b")):
        start = len(requests)
        theirs = tau3_pipeline(provider, model, docs)
        middle = len(requests)
        ours = DenseRetriever(docs, api_embedder(provider, {"embedder_base_url": url}, domain_dir), top_k=10)
        same_docs = requests[start:middle] == requests[middle:]
        equal = 0
        for query in QUERIES:
            before = len(requests)
            tau3 = theirs.retrieve(query)
            mid = len(requests)
            memrl = ours.search(query)
            equal += tau3 == memrl and requests[before:mid] == requests[mid:]
        print(f"{provider}: document requests equal {same_docs}; {equal}/{len(QUERIES)} queries with equal "
              "requests and equal top-10 (ids and scores)")
    server.close()


if __name__ == "__main__":
    main()
