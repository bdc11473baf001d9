"""The ``banking_knowledge`` domain: τ³'s bank, its knowledge base and a retrieval variant, as a memrl domain.

``env.tool_options`` picks the retrieval (τ³'s ``--retrieval-config`` and its keyword overrides):

* ``retrieval_variant``: ``bm25`` (default), ``bm25_grep``, ``grep_only``, ``no_knowledge``, ``full_kb``,
  ``golden_retrieval``, a dense variant (``openai_embeddings[_grep]``, ``qwen_embeddings[_grep]``)
  with your own ``embedder``, or a reranked one (``bm25_reranker[_grep]``,
  ``{openai,qwen}_embeddings_reranker[_grep]``) with a ``reranker``, a sandboxed shell
  (``terminal_use``, ``terminal_use_write``; :mod:`~memrl.envs.domains.banking_knowledge.sandbox`), or
  ``alltools`` / ``alltools-qwen`` (BM25, dense with your ``embedder``, and the shell);
* ``top_k`` (KB_search, 10), ``grep_top_k`` (10), ``case_sensitive`` (grep, false);
* ``embedder``: ``openai`` (τ³'s embedding requests, to an endpoint you name: ``embedder_model``,
  ``embedder_base_url``, ``embedder_api_key_env``, ``embedder_query_instruction``; see
  :mod:`~memrl.envs.domains.banking_knowledge.embed`) or ``package.module:function`` mapping a list of
  texts to an (n, d) array;
* ``reranker`` (``openai`` or ``package.module:function``), ``reranker_min_score`` (5) and, for
  ``openai``, ``reranker_model``, ``reranker_base_url``, ``reranker_api_key_env``, ``reranker_prompt``:
  see :mod:`~memrl.envs.domains.banking_knowledge.rerank`.

The environment depends on the task, as τ³'s does: ``new_env(task=...)`` logs read-only discoverable
calls only for the tools the task's gold actions read (its *read-log allowlist*), shows the user
simulator only the task's ``user_tools``, and fills ``golden_retrieval``'s prompt with the task's
required documents. Solo mode is refused, as in τ³.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from memrl.io.urls import no_credentials
from memrl.data.errors import DataError
from memrl.io.text_files import read_json
from memrl.envs.domain import Domain, _locate
from memrl.envs.domains.banking_knowledge import records
from memrl.envs.domains.banking_knowledge.embed import api_embedder
from memrl.envs.domains.banking_knowledge.rerank import DEFAULT_MIN_SCORE, RerankedRetriever, openai_rater
from memrl.envs.domains.banking_knowledge.retrieval import (BM25Retriever, DenseRetriever, Document, GrepRetriever,
                                                            Retriever, load_documents)
from memrl.envs.domains.banking_knowledge.sandbox import Sandbox, check_sandbox
from memrl.envs.domains.banking_knowledge.toolkits import agent_class
from memrl.envs.domains.banking_knowledge.user_tools import KnowledgeUserTools
from memrl.envs.domains.banking_knowledge.variants import DEFAULT_VARIANT, Variant, build_policy, option, resolve
from memrl.envs.environment import Environment
from memrl.envs.tasks import Task, read_tasks

NAME = "banking_knowledge"
OPTIONS = ("retrieval_variant", "top_k", "grep_top_k", "case_sensitive", "embedder", "reranker", "reranker_min_score",
           "reranker_model", "reranker_base_url", "reranker_api_key_env", "reranker_prompt", "embedder_model",
           "embedder_base_url", "embedder_api_key_env", "embedder_query_instruction")


def read_log_allowlist(task: Task | None) -> set[str]:
    """The discoverable tools the task's gold actions call (τ³ logs read-only calls only for these)."""
    crit = task.evaluation_criteria if task is not None else None
    return {str(a.arguments["agent_tool_name"]) for a in (crit.actions or [] if crit else [])
            if a.name == "call_discoverable_agent_tool" and a.arguments.get("agent_tool_name")}


@dataclass
class BankingKnowledgeDomain(Domain):
    """A :class:`~memrl.envs.domain.Domain` whose environments are built per task (see the module doc)."""

    variant: Variant | None = None
    documents: list[Document] = field(default_factory=list, repr=False)
    kb_retriever: Retriever | None = field(default=None, repr=False)
    grep_retriever: Retriever | None = field(default=None, repr=False)
    dense_retriever: Retriever | None = field(default=None, repr=False)

    def new_env(self, solo: bool = False, task: Task | None = None) -> Environment:
        if solo:
            raise ValueError("banking_knowledge domain does not support solo mode (set env.solo=false)")
        assert self.variant is not None and self.folder is not None
        db = json.loads(self.db_text)
        tools = self.toolkit(db)
        tools.kb_retriever, tools.grep_retriever = self.kb_retriever, self.grep_retriever  # type: ignore[attr-defined]
        tools.dense_retriever = self.dense_retriever  # type: ignore[attr-defined]
        if self.variant.shell:  # a folder of its own: terminal_use_write's agent may change the files
            tools.sandbox = Sandbox(self.documents, allow_writes=self.variant.shell == "write")  # type: ignore[attr-defined]
        tools.read_log_allowlist = read_log_allowlist(task)  # type: ignore[attr-defined]
        user = KnowledgeUserTools(db)  # one bank: both sides work on the same database
        user.shown = getattr(task, "user_tools", None)
        policy = self.policy
        if self.variant.prompt == "golden":
            policy = build_policy(self.variant, self.folder / "prompts", self.documents,
                                  getattr(task, "required_documents", None))
        return Environment(self.name, policy, tools, user, prompts=self.prompts)


def _tasks(folder: Path) -> list[Task]:
    """τ³'s task files (``tasks/task_*.json``, what its code reads) when present, else ``tasks.json``."""
    files = sorted((folder / "tasks").glob("task_*.json")) if (folder / "tasks").is_dir() else []
    if not files:
        return read_tasks(folder / "tasks.json")
    tasks = []
    for path in files:
        try:
            tasks.append(Task.model_validate(read_json(path)))
        except ValidationError as err:
            raise DataError(path, None, None, f"not a task ({' '.join(str(err).split())[:200]})") from None
    return tasks


def _dense(variant: Variant, docs: list[Document], opts: dict[str, Any], top_k: int, folder: Path) -> DenseRetriever:
    """Cosine retrieval over ``embedder``: ``openai`` (τ³'s requests, :mod:`.embed`) or the user's function."""
    spec = option(opts, "embedder", str, None)
    if spec is None:
        raise ValueError(f"retrieval variant {variant.name!r} needs tool option embedder: openai (τ³'s embedding "
                         "requests to an endpoint you name) or 'package.module:function' (texts -> embeddings)")
    _check_api_options(opts, "embedder", spec)
    if spec == "openai":
        assert variant.dense is not None
        return DenseRetriever(docs, api_embedder(variant.dense, opts, folder), top_k)
    from memrl.plugins import load_object

    return DenseRetriever(docs, load_object(spec, "banking_knowledge embedder"), top_k)


def _check_api_options(opts: dict[str, Any], prefix: str, spec: str) -> None:
    """``<prefix>_*`` options are strings and belong to ``<prefix>=openai`` (else they would silently do nothing)."""
    for key in sorted(k for k in opts if k.startswith(prefix + "_") and k != "reranker_min_score"):
        option(opts, key, str, None)
        if spec != "openai":
            raise ValueError(f"tool option {key} applies to {prefix}=openai, not {spec!r}")


def _retrievers(variant: Variant, docs: list[Document], opts: dict[str, Any],
                folder: Path) -> tuple[Retriever | None, Retriever | None, Retriever | None]:
    """``(KB_search's or KB_search_bm25's, grep's, KB_search_dense's)`` retrievers of the variant."""
    top_k, grep_k = option(opts, "top_k", int, 10), option(opts, "grep_top_k", int, 10)
    kb: Retriever | None = None
    if variant.kb_search == "bm25":
        kb = BM25Retriever(docs, top_k)
    elif variant.kb_search == "dense":
        kb = _dense(variant, docs, opts, top_k, folder)
    _refuse_unused(opts, "reranker", variant.rerank, "the *_reranker retrieval variants", variant)
    _refuse_unused(opts, "embedder", variant.dense is not None, "the dense retrieval variants", variant)
    if kb is not None and variant.rerank:
        kb = reranked(kb, opts, folder)
    grep = GrepRetriever(docs, grep_k, option(opts, "case_sensitive", bool, False)) if variant.grep else None
    dense = _dense(variant, docs, opts, top_k, folder) if variant.all_tools else None
    return kb, grep, dense


def _refuse_unused(opts: dict[str, Any], prefix: str, used: bool, where: str, variant: Variant) -> None:
    """An option the variant does not read would silently do nothing: refuse it, naming where it applies."""
    given = sorted(k for k in opts if k.startswith(prefix))
    if given and not used:
        raise ValueError(f"tool option {given[0]} applies to {where} only, not {variant.name!r}")


def reranked(kb: Retriever, opts: dict[str, Any], folder: Path) -> RerankedRetriever:
    """``kb`` rated by the ``reranker`` tool option (``openai`` or an import path), as τ³'s reranked variants."""
    spec = option(opts, "reranker", str, None)
    if spec is None:
        raise ValueError("a *_reranker retrieval variant needs tool option reranker: openai (τ³'s rating by an "
                         "OpenAI-compatible model) or 'package.module:function' (query, document) -> 0-10")
    min_score = option(opts, "reranker_min_score", int, DEFAULT_MIN_SCORE)
    _check_api_options(opts, "reranker", spec)
    if spec == "openai":
        rate = openai_rater(opts, folder)
    else:
        from memrl.plugins import load_object

        rate = load_object(spec, "banking_knowledge reranker")
    return RerankedRetriever(kb, rate, min_score)


def banking_knowledge_domain(data_dir: str | Path | None = None,
                             tool_options: dict[str, Any] | None = None) -> BankingKnowledgeDomain:
    """The domain factory ``env.domain=banking_knowledge`` resolves to (see the module doc)."""
    opts = dict(tool_options or {})
    unknown = sorted(set(opts) - set(OPTIONS))
    if unknown:
        raise ValueError(f"domain {NAME!r} has no tool option {unknown[0]!r}; options: {', '.join(OPTIONS)}")
    for key in ("embedder_base_url", "reranker_base_url"):
        if isinstance(opts.get(key), str):
            try:
                no_credentials(opts[key])
            except ValueError as err:
                raise ValueError(f"env.tool_options.{key}: {err}") from None
    if data_dir is None:
        raise ValueError(f"domain {NAME!r} is not bundled; set env.data_dir to a τ²-bench (v1.0+) clone "
                         "(or its data/tau2/domains folder)")
    folder = _locate(NAME, data_dir)
    variant = resolve(option(opts, "retrieval_variant", str, DEFAULT_VARIANT))
    docs = load_documents(folder / "documents")
    if variant.shell:
        check_sandbox()  # before anything else: a host that cannot sandbox fails at the start, not per call
    kb, grep, dense = _retrievers(variant, docs, opts, folder)
    try:
        db = records.normalize_db(read_json(folder / "db.json"))
    except DataError:
        raise
    except (OSError, ValueError) as err:
        raise DataError(folder / "db.json", None, None, str(err)) from None
    split_file = folder / "split_tasks.json"
    return BankingKnowledgeDomain(
        name=NAME, policy=build_policy(variant, folder / "prompts", docs), tasks=_tasks(folder),
        db_text=json.dumps(db), toolkit=agent_class(variant), user_toolkit=KnowledgeUserTools,
        splits=read_json(split_file) if split_file.is_file() else {}, folder=folder,
        tool_options=opts, variant=variant, documents=docs, kb_retriever=kb, grep_retriever=grep,
        dense_retriever=dense)
