"""The agent's toolkit for each retrieval variant: the banking tools plus ``KB_search``, ``grep`` or ``shell``.

As in τ³, the retrieval tools are mixins placed before the banking tools, so the agent's tool list
starts with them (``KB_search``, ``grep``, then ``transfer_to_human_agents``...). The retrievers
are built once per domain and shared by every environment (they only read); a sandbox is one per
environment (``terminal_use_write`` lets the agent change its files). The retrieval tools are ``blocking``:
an episode runs them in a worker thread, so a sandboxed command (~0.4 s), a rating or embedding request or
a long grep holds up only its own episode; a custom embedder or rater may be called from several threads.
"""

from __future__ import annotations

from memrl.envs.domains.banking_knowledge.agent_tools import KnowledgeTools
from memrl.envs.domains.banking_knowledge.retrieval import Retriever, grep_text, kb_search_text
from memrl.envs.domains.banking_knowledge.sandbox import Sandbox, shell_text
from memrl.envs.domains.banking_knowledge.variants import Variant
from memrl.envs.toolkit import tool


class KBSearchMixin:
    """``KB_search`` over ``kb_retriever`` (BM25 or dense)."""

    kb_retriever: Retriever | None = None

    @tool("read", blocking=True)
    def KB_search(self, query: str) -> str:  # noqa: N802 - τ³'s tool name
        """Search the knowledge base for relevant documents.

        Args:
            query: The search query to find relevant documents

        Returns:
            Relevant document excerpts matching the query
        """
        assert self.kb_retriever is not None, "KB_search without a retriever"
        return kb_search_text(self.kb_retriever, query)


class GrepMixin:
    """``grep`` over ``grep_retriever``."""

    grep_retriever: Retriever | None = None

    @tool("read", blocking=True)
    def grep(self, pattern: str) -> str:
        """Search for a regex pattern in all knowledge base documents.

        Returns documents ranked by number of matches, with full content.

        Args:
            pattern: The regex pattern to search for (e.g., 'credit.*card', 'fee|charge')

        Returns:
            Matching documents ranked by relevance (match count)
        """
        assert self.grep_retriever is not None, "grep without a retriever"
        return grep_text(self.grep_retriever, pattern)


class KBSearchBm25Mixin:
    """``alltools``' BM25 search, ``KB_search_bm25`` over ``kb_retriever`` with the agent's ``k``."""

    kb_retriever: Retriever | None = None

    @tool("read")
    def KB_search_bm25(self, query: str, k: int = 10) -> str:  # noqa: N802 - τ³'s tool name
        """Search the knowledge base using BM25 sparse retrieval.

        Args:
            query: The search query to find relevant documents.
            k: Maximum number of documents to return (default 10).

        Returns:
            Relevant document excerpts matching the query.
        """
        assert self.kb_retriever is not None, "KB_search_bm25 without a retriever"
        return kb_search_text(self.kb_retriever, query, k)


class KBSearchDenseMixin:
    """``alltools``' dense search, ``KB_search_dense`` over ``dense_retriever`` with the agent's ``k``."""

    dense_retriever: Retriever | None = None

    @tool("read", blocking=True)
    def KB_search_dense(self, query: str, k: int = 10) -> str:  # noqa: N802 - τ³'s tool name
        """Search the knowledge base using dense embedding retrieval.

        Args:
            query: The search query to find relevant documents.
            k: Maximum number of documents to return (default 10).

        Returns:
            Relevant document excerpts matching the query.
        """
        assert self.dense_retriever is not None, "KB_search_dense without a retriever"
        return kb_search_text(self.dense_retriever, query, k)


class ShellMixin:
    """``shell`` in the environment's own ``sandbox`` (a folder of the documents; see :mod:`.sandbox`)."""

    sandbox: Sandbox | None = None

    @tool("read", blocking=True)
    def shell(self, command: str) -> str:
        """Execute a shell command in the knowledge base directory.

        Use standard Unix utilities to explore and search the knowledge base files.
        Common commands: ls, cat, grep, head, tail, find, wc, awk, sed, etc.

        Args:
            command: The shell command to execute (e.g., "ls -la", "grep -r 'credit card' .", "cat INDEX.txt")

        Returns:
            The command output (stdout) or error message
        """
        if self.sandbox is None:
            return "Error: Sandbox not initialized"
        return shell_text(self.sandbox, command)


class KnowledgeToolsWithKBSearch(KBSearchMixin, KnowledgeTools):
    tau2_class = "tau2.domains.banking_knowledge.retrieval_toolkits:KnowledgeToolsWithKBSearch"


class KnowledgeToolsWithGrep(GrepMixin, KnowledgeTools):
    tau2_class = "tau2.domains.banking_knowledge.retrieval_toolkits:KnowledgeToolsWithGrep"


class KnowledgeToolsWithKBSearchAndGrep(KBSearchMixin, GrepMixin, KnowledgeTools):
    tau2_class = "tau2.domains.banking_knowledge.retrieval_toolkits:KnowledgeToolsWithKBSearchAndGrep"


class KnowledgeToolsWithShell(ShellMixin, KnowledgeTools):
    tau2_class = "tau2.domains.banking_knowledge.retrieval_toolkits:KnowledgeToolsWithShell"


class KnowledgeToolsAllTools(KBSearchBm25Mixin, KBSearchDenseMixin, ShellMixin, KnowledgeTools):
    tau2_class = "tau2.domains.banking_knowledge.retrieval_toolkits:KnowledgeToolsAllTools"


def agent_class(variant: Variant) -> type[KnowledgeTools]:
    """The toolkit class a variant's agent gets (τ³'s composed classes)."""
    if variant.all_tools:
        return KnowledgeToolsAllTools
    if variant.shell:
        return KnowledgeToolsWithShell
    if variant.kb_search and variant.grep:
        return KnowledgeToolsWithKBSearchAndGrep
    if variant.kb_search:
        return KnowledgeToolsWithKBSearch
    if variant.grep:
        return KnowledgeToolsWithGrep
    return KnowledgeTools
