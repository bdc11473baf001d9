"""memrl's reranked ``KB_search`` beside τ³'s own ``PointwiseLLMReranker``, against one local fake OpenAI server.

For each query, BM25's top 10 over the banking knowledge base is reranked twice: by τ³'s class
(imported from your τ²-bench clone) and by memrl's ``bm25_reranker`` variant with ``reranker=openai``.
The fake server rates each request by a hash of its prompt (-1..11, so clamping is exercised) and
fails one request in 17 with HTTP 500 (a failed rating drops the document). Printed per query: the
documents each kept, whether the kept lists are equal, and whether the request bodies are equal.

    pip install loguru pandas toml addict deepdiff python-dotenv litellm   # what importing τ³'s module needs
    PYTHONPATH=~/tau2-bench/src python bench/tau3_rerank_parity.py --tau2 ~/tau2-bench --data ../shared/tau2

Nothing leaves the machine: both clients talk to the fake server on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

from fake_openai import FakeServer

QUERIES = ["debit card dispute regulation e provisional credit", "open business checking account eligibility",
           "personal credit card highest cash back no annual fee", "wire transfer limits", "lost card replacement fee",
           "overdraft protection savings link", "mortgage rate lock", "zelle"]


def rate(body: dict) -> tuple[int, dict]:
    """The fake server's answer: a rating from the prompt's hash, or a 500 for one prompt in 17."""
    digest = int(hashlib.sha256(body["messages"][0]["content"].encode()).hexdigest(), 16)
    if digest % 17 == 0:
        return 500, {"error": {"message": "rating failed"}}
    return 200, {"id": "r", "object": "chat.completion", "created": 0, "model": body["model"],
                 "choices": [{"index": 0, "finish_reason": "stop", "message": {
                     "role": "assistant", "content": json.dumps({"relevance_score": digest % 13 - 1})}}]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tau2", type=Path, required=True, help="a τ²-bench clone (its src/ on PYTHONPATH)")
    ap.add_argument("--data", type=Path, default=None, help="env.data_dir for memrl (default: the clone)")
    args = ap.parse_args()
    server = FakeServer(rate)
    url, requests = server.url, server.requests
    os.environ.update(OPENAI_BASE_URL=url, OPENAI_API_KEY="sk-local")  # τ³'s client reads these
    from tau2.knowledge.postprocessors.pointwise_llm_reranker import PointwiseLLMReranker

    from memrl.envs.domain import load_domain
    from memrl.envs.domains.banking_knowledge.rerank import rating_prompt

    domain_dir = args.tau2 / "data/tau2/domains/banking_knowledge"
    prompt = Path(os.environ.get("TMPDIR", "/tmp")) / "tau3_rating_prompt.txt"
    prompt.write_text(rating_prompt(domain_dir))  # read from the clone, as reranker=openai reads it there
    ours = load_domain("banking_knowledge", args.data or args.tau2, tool_options={
        "retrieval_variant": "bm25_reranker", "reranker": "openai", "reranker_base_url": url,
        "reranker_prompt": str(prompt)}).kb_retriever
    theirs = PointwiseLLMReranker(min_score=5)  # τ³'s bm25_reranker: PipelineSpec(reranker_min_score=5)
    state = {"doc_content_map": {doc.id: doc.content for doc in ours.docs}}
    equal = 0
    for query in QUERIES:
        hits = ours.base.search(query)
        start = len(requests)
        tau3 = theirs.process(list(hits), {"query": query}, state)
        middle = len(requests)
        memrl = ours.search(query)
        same_requests = sorted(requests[start:middle]) == sorted(requests[middle:])
        equal += tau3 == memrl and same_requests
        print(f"{query[:44]:44s}  kept tau3 {len(tau3):2d} memrl {len(memrl):2d}  results equal {tau3 == memrl}  "
              f"requests equal {same_requests} ({middle - start} / {len(requests) - middle})")
    print(f"{equal}/{len(QUERIES)} queries: same documents, same ratings, same order, same requests")
    server.close()


if __name__ == "__main__":
    main()
