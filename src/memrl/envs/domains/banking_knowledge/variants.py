"""τ³'s retrieval variants (``--retrieval-config``): which search tools the agent gets, and its prompt.

Each variant names a prompt template in the domain's ``prompts/`` folder and the retrieval tools
it adds to the banking tools: ``KB_search`` (BM25 or dense, reranked or not), ``grep``, a sandboxed
``shell`` (``terminal_use[_write]``), all of BM25, dense and shell (``alltools[-qwen]``), or none (the
knowledge base is then in the prompt, whole or the task's required documents, or absent). Every τ³
variant is here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from memrl.envs.domains.banking_knowledge.retrieval import Document
from memrl.io.text_files import read_text


@dataclass(frozen=True)
class Variant:
    """A retrieval configuration: the prompt template, the ``KB_search`` backend (None: no such tool),
    whether ``grep`` is offered, and how the prompt is completed (``prompt``)."""

    name: str
    template: str
    kb_search: Literal["bm25", "dense"] | None = None
    grep: bool = False
    prompt: Literal["standard", "full_kb", "golden"] = "standard"
    rerank: bool = False  # KB_search's hits rated and filtered (τ³'s pointwise reranker; memrl.envs...rerank)
    shell: Literal["read", "write"] | None = None  # a sandboxed shell over the documents (read-only or not)
    # alltools: KB_search_bm25, KB_search_dense and shell; the prompt names the dense model (provider, model)
    all_tools: tuple[str, str] | None = None
    dense: Literal["openai", "openrouter"] | None = None  # whose embeddings τ³ asks for (memrl: embedder=openai)


VARIANTS = {v.name: v for v in (
    Variant("no_knowledge", "no_knowledge.md"),
    Variant("full_kb", "full_kb.md", prompt="full_kb"),
    Variant("golden_retrieval", "required_docs.md", prompt="golden"),
    Variant("bm25", "classic_rag_bm25_no_grep.md", kb_search="bm25"),
    Variant("bm25_grep", "classic_rag_bm25.md", kb_search="bm25", grep=True),
    Variant("grep_only", "grep_only.md", grep=True),
    Variant("openai_embeddings", "classic_rag_openai_no_grep.md", kb_search="dense", dense="openai"),
    Variant("openai_embeddings_grep", "classic_rag_openai.md", kb_search="dense", grep=True, dense="openai"),
    Variant("qwen_embeddings", "classic_rag_qwen_no_grep.md", kb_search="dense", dense="openrouter"),
    Variant("qwen_embeddings_grep", "classic_rag_qwen.md", kb_search="dense", grep=True, dense="openrouter"),
)}
VARIANTS.update({f"{v.name}_reranker{suffix}": replace(VARIANTS[v.name + suffix], name=f"{v.name}_reranker{suffix}",
                                                       rerank=True)
                 for v in (VARIANTS["bm25"], VARIANTS["openai_embeddings"], VARIANTS["qwen_embeddings"])
                 for suffix in ("", "_grep")})
VARIANTS.update({v.name: v for v in (
    Variant("terminal_use", "agentic_search.md", shell="read"),
    Variant("terminal_use_write", "agentic_search_write.md", shell="write"),
    Variant("alltools", "all_tools.md", kb_search="bm25", shell="read",
            all_tools=("OpenAI API", "text-embedding-3-large"), dense="openai"),
    Variant("alltools-qwen", "all_tools.md", kb_search="bm25", shell="read",
            all_tools=("OpenRouter", "qwen3-embedding-8b"), dense="openrouter"),
)})
ALIASES = {"AllTools": "alltools"}
DEFAULT_VARIANT = "bm25"  # τ³'s default is alltools (needs a sandbox and an embedding API); bm25 runs offline


def resolve(name: str) -> Variant:
    """The variant ``name``; a one-line error for an unknown name."""
    name = ALIASES.get(name, name)
    if name not in VARIANTS:
        raise ValueError(f"unknown retrieval variant {name!r}; choose one of {', '.join(VARIANTS)}")
    return VARIANTS[name]


def _components(text: str, prompts: Path) -> str:
    def fill(m: re.Match[str]) -> str:
        path = prompts / "components" / f"{m.group(1)}.md"
        if not path.is_file():
            raise FileNotFoundError(f"prompt component not found: {path}")
        return read_text(path)

    return re.sub(r"\{\{component:(\w+)\}\}", fill, text)


def _as_markdown(docs: list[Document]) -> str:
    return "\n\n---\n\n".join(f"## {d.title}\n\n{d.content}" for d in docs)


def build_policy(variant: Variant, prompts: Path, docs: list[Document], required: list[str] | None = None) -> str:
    """The agent's system prompt: the template with its components, and for ``full_kb`` every document,
    for ``golden_retrieval`` the task's required documents (by title, else id; unknown ones skipped)."""
    path = prompts / variant.template
    if not path.is_file():
        raise FileNotFoundError(f"prompt template not found: {path}")
    text = _components(read_text(path), prompts)
    if variant.prompt == "full_kb":
        text = text.replace("{{full_knowledge_base}}", _as_markdown(docs))
    elif variant.prompt == "golden":
        by_title, by_id = {d.title: d for d in docs}, {d.id: d for d in docs}
        chosen = [by_title.get(ref) or by_id[ref] for ref in required or [] if ref in by_title or ref in by_id]
        text = text.replace("{{required_documents}}", _as_markdown(chosen) if chosen else "(No documents provided)")
    if variant.all_tools:  # τ³ names the dense retriever's provider and model in the alltools prompt
        provider, model = variant.all_tools
        text = text.replace("{{all_tools_dense_instructions}}",
                            f"The `KB_search_dense` tool uses **{provider}** with embedding model `{model}` for "
                            "dense retrieval.")
    if not text.strip():
        raise ValueError(f"the prompt of retrieval variant {variant.name!r} is empty ({path})")
    return text


def option(options: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    """A retrieval option from ``env.tool_options``, type-checked with a one-line error."""
    value = options.get(key, default)
    if value is not default and not (isinstance(value, kind) and not (kind is int and isinstance(value, bool))):
        raise ValueError(f"banking_knowledge tool option {key}: expected {kind.__name__}, got {value!r}")
    return value
