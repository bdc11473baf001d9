"""τ³'s reranked retrieval (the ``*_reranker[_grep]`` variants): retrieve, rate each hit, keep the relevant.

τ³'s pipeline (``pointwise_llm_reranker`` after BM25 or dense retrieval) takes the retriever's top
``top_k`` documents, asks a rater for each one's relevance to the query on a 0-10 scale, and keeps the
documents rated at least ``reranker_min_score`` (5 in every τ³ variant), best rating first; equal
ratings keep the retriever's order, a document with empty content is not rated, and a document whose
rating fails is dropped. ``KB_search`` then shows the rating as the document's score and the time
spent rating (``reranking=...ms``).

The rater is the tool option ``reranker``:

* ``openai``: τ³'s own rating, one chat request per document to an OpenAI-compatible endpoint
  (``reranker_base_url``; default OpenAI's, key from ``$OPENAI_API_KEY`` or ``reranker_api_key_env``)
  with model ``reranker_model`` (τ³'s default ``gpt-5.2``), structured output
  ``{"relevance_score": int}``, ``reasoning_effort=low`` for gpt-5 models, at most 20 requests at once.
  Its prompt is τ³'s, read from your τ²-bench clone (the one ``env.data_dir`` points into) or from
  the file ``reranker_prompt`` (a text with two ``{}``: the query, then the document).
* ``package.module:function``: your own ``rate(query, document) -> number`` (clamped to 0-10), for a
  local model, a cross-encoder, or a test.

memrl calls no API unless you name one here.
"""

from __future__ import annotations

import ast
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from memrl.envs.domains.banking_knowledge.retrieval import Retriever

Rater = Callable[[str, str], Any]
MAX_RATING = 10
DEFAULT_MIN_SCORE = 5  # τ³'s PipelineSpec.reranker_min_score
DEFAULT_MODEL = "gpt-5.2"  # τ³'s PointwiseLLMReranker default
MAX_CONCURRENCY = 20  # τ³'s DEFAULT_MAX_CONCURRENCY
# where τ³ keeps its rating prompt, relative to the root of a τ²-bench clone
PROMPT_SOURCE = Path("src/tau2/knowledge/postprocessors/pointwise_llm_reranker.py")
PROMPT_NAME = "DEFAULT_POINTWISE_PROMPT"


class RerankedRetriever(Retriever):
    """``base``'s hits rated by ``rate(query, document)`` and filtered as τ³'s pointwise reranker does."""

    reranks = True

    def __init__(self, base: Retriever, rate: Rater, min_score: int = DEFAULT_MIN_SCORE,
                 max_concurrency: int = MAX_CONCURRENCY) -> None:
        super().__init__(base.docs, base.top_k)
        self.base, self.rate, self.min_score, self.max_concurrency = base, rate, min_score, max_concurrency
        self._warned = threading.Event()

    def search_timed(self, query: str) -> tuple[list[tuple[str, float]], float, float]:
        start = time.perf_counter()
        hits = self.base.search(query)
        retrieved = time.perf_counter()
        ranked = self.rerank(query, hits)
        return ranked, (retrieved - start) * 1000, (time.perf_counter() - retrieved) * 1000

    def search(self, query: str) -> list[tuple[str, float]]:
        return self.search_timed(query)[0]

    def rerank(self, query: str, hits: list[tuple[str, float]]) -> list[tuple[str, float]]:
        """The hits rated at least ``min_score``, by rating (a stable sort: ties keep the retriever's order)."""
        todo = [doc_id for doc_id, _ in hits if self.by_id[doc_id].content]
        if not todo:
            return []
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(todo))) as pool:
            ratings = list(pool.map(lambda doc_id: self._rating(query, doc_id), todo))
        kept = [(doc_id, r) for doc_id, r in zip(todo, ratings) if r is not None and r >= self.min_score]
        kept.sort(key=lambda hit: hit[1], reverse=True)
        return kept

    def _rating(self, query: str, doc_id: str) -> float | None:
        """The clamped rating of one document, or None (dropped, as τ³ drops it) when the rater fails."""
        try:
            value = self.rate(query, self.by_id[doc_id].content)
            number = float(value)
            if not math.isfinite(number):
                raise ValueError(f"not a finite number: {value!r}")
        except Exception as exc:  # noqa: BLE001 - τ³ drops a document whose rating fails, whatever the error
            self._warn(f"{doc_id}: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}")
            return None
        return float(max(0, min(MAX_RATING, number)))

    def _warn(self, what: str) -> None:
        """One line on the first failed rating (τ³ is silent; a rater that always fails would empty every search)."""
        if not self._warned.is_set():
            self._warned.set()
            print(f"banking_knowledge reranker: a rating failed, the document is dropped (as τ³ does; further "
                  f"failures are not reported): {what}", file=sys.stderr)


# The structured answer the rater asks for: τ³'s response format. No docstring: it would travel in the request's
# JSON schema as a "description", and the request would no longer be τ³'s.
class RelevanceScore(BaseModel):
    relevance_score: int


class OpenAIRater:
    """τ³'s pointwise rating through an OpenAI-compatible endpoint: ``prompt.format(query, document)`` as one
    user message, the answer parsed as :class:`RelevanceScore` and clamped to 0-10 (0 when nothing parses)."""

    def __init__(self, prompt: str, model: str, client: Any, reasoning_effort: str | None = "low") -> None:
        self.prompt, self.model, self.client, self.reasoning_effort = prompt, model, client, reasoning_effort

    def __call__(self, query: str, document: str) -> int:
        kwargs: dict[str, Any] = {"model": self.model, "response_format": RelevanceScore,
                                  "messages": [{"role": "user", "content": self.prompt.format(query, document)}]}
        if self.reasoning_effort and self.model.startswith("gpt-5"):  # τ³ sends it to gpt-5 models only
            kwargs["reasoning_effort"] = self.reasoning_effort
        completions = self.client.chat.completions
        parse = getattr(completions, "parse", None) or self.client.beta.chat.completions.parse
        parsed = parse(**kwargs).choices[0].message.parsed
        return max(0, min(MAX_RATING, parsed.relevance_score)) if parsed else 0


def rating_prompt(domain_folder: Path, override: str | None = None) -> str:
    """τ³'s rating prompt: the file ``override``, else the constant in the τ²-bench clone above the domain folder.

    The prompt is τ³'s text, so memrl reads it from the user's copy instead of shipping it."""
    if override is not None:
        path = Path(override).expanduser()
        if not path.is_file():
            raise ValueError(f"banking_knowledge tool option reranker_prompt: no file {path}")
        return _checked_prompt(path.read_text(), str(path))
    found = clone_constant(domain_folder, PROMPT_SOURCE, PROMPT_NAME)
    if found is not None:
        return _checked_prompt(found, f"{PROMPT_SOURCE} ({PROMPT_NAME})")
    raise ValueError(f"reranker=openai rates with τ³'s prompt, read from your τ²-bench clone ({PROMPT_SOURCE}), "
                     f"but none is above {domain_folder}: point env.data_dir into the clone, or give tool option "
                     "reranker_prompt=FILE (a text with two {} for the query and the document)")


def clone_constant(domain_folder: Path, source: Path, name: str) -> str | None:
    """The string constant ``name`` of the file ``source`` in the τ²-bench clone holding ``domain_folder``
    (found by walking up from it), or None when the folder is not inside a clone."""
    for root in domain_folder.resolve().parents:
        if (root / source).is_file():
            return read_constant(root / source, name)
    return None


def read_constant(source: Path, name: str) -> str:
    """The string assigned to ``name`` at the top of a Python file, read without running the file."""
    tree = ast.parse(source.read_text(), filename=str(source))
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            return node.value.value
    raise ValueError(f"{source}: no string constant {name}; is this a τ²-bench (v1.0+) clone?")


def _checked_prompt(text: str, where: str) -> str:
    if text.count("{}") != 2:
        raise ValueError(f"rating prompt {where}: expected two {{}} (the query, then the document), "
                         f"found {text.count('{}')}")
    return text


def openai_rater(options: dict[str, Any], domain_folder: Path) -> OpenAIRater:
    """The ``reranker=openai`` rater from the ``reranker_*`` tool options."""
    from openai import OpenAI

    key_env = options.get("reranker_api_key_env") or "OPENAI_API_KEY"
    base_url = options.get("reranker_base_url")
    key = os.environ.get(key_env)
    if not key and not base_url:
        raise ValueError(f"reranker=openai calls OpenAI's API: set ${key_env} (or tool option reranker_base_url "
                         "for another OpenAI-compatible server)")
    client = OpenAI(base_url=base_url, api_key=key or "EMPTY")
    return OpenAIRater(rating_prompt(domain_folder, options.get("reranker_prompt")),
                       options.get("reranker_model") or DEFAULT_MODEL, client)
