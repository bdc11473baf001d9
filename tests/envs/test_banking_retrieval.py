"""banking_knowledge retrieval and prompt variants.

The BM25 rankings below are what τ³'s own pipeline (``create_bm25_retrieval_pipeline``: rank_bm25's
BM25Okapi over lower-cased whitespace tokens, top 10) returns for the same queries on the same 698
documents; memrl's scores equal τ³'s to 1e-9 (checked side by side). Grep counts regex matches per
document. The dense retriever is checked on a toy corpus with a bag-of-words embedder.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memrl.envs.domain import load_domain
from memrl.envs.domains.banking_knowledge.retrieval import (BM25Retriever, DenseRetriever, Document, GrepRetriever,
                                                            grep_text, kb_search_text, load_documents)

# query -> τ³'s top 5 (document id, score rounded to 2 decimals)
TAU3_BM25 = {
    "personal credit card highest cash back no annual fee": [
        ("doc_business_credit_cards_business_gold_rewards_card_001", 18.35),
        ("doc_credit_cards_silver_rewards_card_001", 14.55),
        ("doc_business_credit_cards_business_silver_rewards_card_001", 13.15),
        ("doc_business_credit_cards_business_bronze_rewards_card_001", 13.1),
        ("doc_credit_cards_credit_cards_(general)_006", 12.45)],
    "open business checking account eligibility": [
        ("doc_bank_accounts_bank_accounts_(general)_003", 14.77),
        ("doc_bank_accounts_bank_accounts_(general)_004", 14.26),
        ("doc_bank_accounts_bank_accounts_(general)_023", 12.16),
        ("doc_savings_accounts_silver_account_002", 11.46),
        ("doc_bank_accounts_bank_accounts_(general)_001", 11.44)],
    "debit card dispute regulation e provisional credit": [
        ("doc_bank_accounts_bank_accounts_(general)_037", 25.94),
        ("doc_bank_accounts_bank_accounts_(general)_032", 24.07),
        ("doc_bank_accounts_bank_accounts_(general)_035", 22.68),
        ("doc_bank_accounts_bank_accounts_(general)_031", 19.94),
        ("doc_credit_cards_credit_cards_(general)_022", 18.08)],
}


@pytest.fixture(scope="module")
def kb_dir(tau2_dir) -> Path:
    folder = tau2_dir / "banking_knowledge"
    if not (folder / "documents").is_dir():
        pytest.skip(f"no banking_knowledge data in {tau2_dir}")
    return folder


@pytest.fixture(scope="module")
def docs(kb_dir):
    return load_documents(kb_dir / "documents")


def test_bm25_ranks_as_tau3(docs):
    assert len(docs) == 698
    bm25 = BM25Retriever(docs)
    for query, expected in TAU3_BM25.items():
        hits = bm25.search(query)
        assert len(hits) == 10
        assert [(d, round(s, 2)) for d, s in hits[:5]] == expected, query
    assert bm25.search("   ") == []


def test_grep_counts_matches_and_falls_back_to_literal(docs):
    grep = GrepRetriever(docs)
    assert grep.search(r"submit_cash_back_dispute_\d+") == [("doc_credit_cards_credit_cards_(general)_003", 1.0)]
    hits = grep.search("transfer_to_human_agents")
    assert len(hits) == 6 and [s for _, s in hits] == [2.0, 2.0, 1.0, 1.0, 1.0, 1.0]
    assert {d for d, _ in hits[:2]} == {"doc_bank_accounts_bank_accounts_(general)_037",
                                        "doc_credit_cards_credit_cards_(general)_011"}
    assert grep.search("[unclosed") == []  # not a regex: searched as text
    assert GrepRetriever(docs, case_sensitive=True).search("ANNUAL FEE WAIVER") == []
    assert len(GrepRetriever(docs).search("ANNUAL FEE WAIVER")) == 2
    assert grep_text(grep, "zzqqxx") == "No matches found for pattern: zzqqxx"


def tau3_grep(docs, query: str, case_sensitive: bool = False, top_k: int = 10) -> list[tuple[str, float]]:
    """τ³'s ``GrepRetriever.retrieve`` (Python's ``re``), as the reference."""
    import re

    if not query.strip():
        return []
    flags = 0 if case_sensitive else re.IGNORECASE
    try:
        pattern = re.compile(query, flags)
    except re.error:
        pattern = re.compile(re.escape(query), flags)
    hits = [(d.id, float(len(m))) for d in docs if (m := pattern.findall(d.content))]
    hits.sort(key=lambda h: h[1], reverse=True)
    return hits[:top_k]


GREP_PATTERNS = ["annual fee", "ANNUAL FEE", r"\bfee\b", r"\d+(\.\d+)?%", r"\$[\d,]+", "", "a*", r"(?=fee)", "^",
                 "$", r"^\s*#+ .*$", r"(?m)^\s*#+ .*$", r"(?i)dispute|chargeback", r"(?s)card.{0,40}limit",
                 r"[A-Z]{3,}", r"\w+@\w+\.com", r"(credit|debit) card", r"(?P<n>\d)\s*days?", "[", "(", "a{2,",
                 r"\bé", "straße", r"[^\x00-\x7f]", r"(?<=\$)\d+", r"\b(\w+) \1\b", "fee(s)?|charge(s)?", ".",
                 r"\p{L}", "(?:a|b)+?c"]


@pytest.mark.parametrize("case_sensitive", [False, True])
def test_grep_finds_what_tau3s_re_finds(docs, case_sensitive):
    """The search runs on ``regex``'s engine (it can stop); its matches must be ``re``'s on the real KB."""
    grep = GrepRetriever(docs, top_k=len(docs), case_sensitive=case_sensitive)
    for query in GREP_PATTERNS:
        assert grep.search(query) == tau3_grep(docs, query, case_sensitive, len(docs)), query


def test_a_pattern_that_backtracks_for_minutes_is_stopped(docs):
    """τ³'s ``re`` takes minutes over the KB for such a pattern (x4 per 2 more characters), holding the
    interpreter lock, and so does ``regex`` for this one; memrl stops at the budget with an error the agent
    reads."""
    grep = GrepRetriever(docs, budget_s=0.2)
    with pytest.raises(TimeoutError, match="took over 0.2 s on the knowledge base"):
        grep.search(r"(.?){12}.{12}\d{30}")
    assert grep.search("annual fee")  # the retriever still works after a stop


def test_kb_search_text_layout(docs):
    text = kb_search_text(BM25Retriever(docs, top_k=2), "open business checking account eligibility")
    first = text.split("\n")
    assert first[0].startswith("1. ") and first[1] == "   ID: doc_bank_accounts_bank_accounts_(general)_003"
    assert first[2] == "   Score: 14.7738" and first[3].startswith("   Content: ")
    ids = [ln for ln in text.split("\n") if ln.startswith("   ID: ")]  # top_k=2: two documents
    assert ids == [first[1], "   ID: doc_bank_accounts_bank_accounts_(general)_004"]
    assert text.rsplit("\n", 1)[-1].startswith("[Timing: retrieval=")
    assert kb_search_text(BM25Retriever(docs), "").startswith("No relevant documents found.\n\n[Timing:")


def test_dense_ranks_by_cosine():
    vocab = ["card", "fee", "loan", "rate"]

    def embed(texts):
        return np.array([[t.split().count(w) for w in vocab] for t in texts], dtype=float)

    corpus = [Document("a", "A", "card fee fee"), Document("b", "B", "loan rate"), Document("c", "C", "card card")]
    hits = DenseRetriever(corpus, embed, top_k=2).search("card")
    assert [d for d, _ in hits] == ["c", "a"]
    assert hits[0][1] == pytest.approx(1.0) and hits[1][1] == pytest.approx(1 / np.sqrt(5))


def test_variants_pick_tools_and_prompts(tau2_dir, kb_dir):
    def tools(variant, **opts):
        bank = load_domain("banking_knowledge", tau2_dir, tool_options={"retrieval_variant": variant, **opts})
        env = bank.new_env()
        return [s["function"]["name"] for s in env.tool_schemas()][:3], env.policy

    names, policy = tools("bm25_grep")
    assert names == ["KB_search", "grep", "transfer_to_human_agents"]
    assert "`KB_search` (uses BM25 for retrieval) and `grep` tools" in policy and "{{" not in policy
    assert policy.startswith("# Rho-Bank Customer Service Policy")
    assert tools("grep_only")[0][0] == "grep" and tools("no_knowledge")[0][0] == "transfer_to_human_agents"
    full = tools("full_kb")[1]
    docs = load_documents(kb_dir / "documents")
    assert all(f"## {d.title}\n\n{d.content}" in full for d in docs)
    assert f"<knowledge_base>\n## {docs[0].title}\n" in full  # file-name order
    with pytest.raises(ValueError, match="needs tool option embedder"):
        tools("openai_embeddings")
    with pytest.raises(ValueError, match="unknown retrieval variant 'bm25_rerank'; choose one of no_knowledge,"):
        tools("bm25_rerank")
    with pytest.raises(ValueError, match="top_k: expected int"):
        tools("bm25", top_k="5")


def test_golden_prompt_holds_the_tasks_documents(tau2_dir, kb_dir):
    bank = load_domain("banking_knowledge", tau2_dir, tool_options={"retrieval_variant": "golden_retrieval"})
    task = next(t for t in bank.tasks if t.id == "task_001")
    policy = bank.new_env(task=task).policy
    by_id = {d.id: d for d in bank.documents}
    for doc_id in task.required_documents:
        assert f"## {by_id[doc_id].title}\n\n{by_id[doc_id].content}" in policy
    assert "<required_documents>\n(No documents provided)\n</required_documents>" in bank.new_env().policy
