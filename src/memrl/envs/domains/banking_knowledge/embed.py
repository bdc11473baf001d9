"""``embedder: openai``: τ³'s own embedding requests for the dense variants, to an endpoint you name.

τ³ embeds every document in one request and each query in one more: OpenAI's
``text-embedding-3-large`` for ``openai_embeddings[_grep|_reranker...]`` and ``alltools``, and
``qwen/qwen3-embedding-8b`` through OpenRouter for the ``qwen_embeddings...`` variants and
``alltools-qwen``, where a query (not a document) is sent as ``Instruct: <instruction>\\nQuery:<query>``
with Qwen's retrieval instruction (read from your τ²-bench clone, as the reranker's prompt is, or given
as ``embedder_query_instruction``). Tool options: ``embedder_model``, ``embedder_base_url`` (default
OpenAI's, or OpenRouter's for the Qwen variants), ``embedder_api_key_env`` (``OPENAI_API_KEY``, or
``OPENROUTER_API_KEY``). Any OpenAI-compatible ``/v1/embeddings`` server works (vLLM, TEI); memrl
calls none unless you name it here. Your own ``package.module:function`` (texts -> array) still works.

The documents' embeddings are kept, as τ³ keeps them, in ``$MEMRL_CACHE/embeddings`` (``~/.cache/memrl``)
under a hash of the model, the endpoint, the request options and every text, as a plain ``.npy`` array
(read without pickle): a run that loads the domain again does not embed the 698 documents again.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memrl.envs.domains.banking_knowledge.rerank import clone_constant

OPENROUTER = "https://openrouter.ai/api/v1"
# τ³'s choices per provider: (model, base URL, key variable, query instruction needed)
PROVIDERS = {"openai": ("text-embedding-3-large", None, "OPENAI_API_KEY", False),
             "openrouter": ("qwen/qwen3-embedding-8b", OPENROUTER, "OPENROUTER_API_KEY", True)}
INSTRUCTION_SOURCE = Path("src/tau2/knowledge/embedders/openrouter_embedder.py")
INSTRUCTION_NAME = "DEFAULT_QWEN_QUERY_INSTRUCTION"


@dataclass
class APIEmbedder:
    """Embeddings from ``client.embeddings.create``; queries get ``instruction`` in Qwen's format when set."""

    client: Any
    model: str
    instruction: str | None = None
    encoding_format: str | None = None  # τ³ sends "float" to OpenRouter only

    def _create(self, texts: list[str]) -> np.ndarray:
        extra = {"encoding_format": self.encoding_format} if self.encoding_format else {}
        response = self.client.embeddings.create(input=texts, model=self.model, **extra)
        return np.array([item.embedding for item in response.data])

    def __call__(self, texts: list[str]) -> np.ndarray:
        """Documents, as they are; from the cache when the same model and endpoint embedded the same texts."""
        from memrl.io.atomic import atomic_path
        from memrl.models.cache import cache_dir

        key = json.dumps({"model": self.model, "url": str(self.client.base_url), "format": self.encoding_format,
                          "texts": list(texts)}, ensure_ascii=False)
        path = cache_dir() / "embeddings" / f"{hashlib.sha256(key.encode()).hexdigest()}.npy"
        if path.is_file():
            return np.load(path, allow_pickle=False)
        matrix = self._create(list(texts))
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            np.save(fh, matrix, allow_pickle=False)
        return matrix

    def embed_query(self, query: str) -> np.ndarray:
        text = f"Instruct: {self.instruction}\nQuery:{query}" if self.instruction else query
        return self._create([text])[0]


def api_embedder(provider: str, options: dict[str, Any], domain_folder: Path) -> APIEmbedder:
    """The ``embedder=openai`` embedder of a variant whose τ³ provider is ``provider`` (openai, openrouter)."""
    from openai import OpenAI

    model, base_url, key_env, instructed = PROVIDERS[provider]
    key_env = options.get("embedder_api_key_env") or key_env
    base_url = options.get("embedder_base_url") or base_url
    key = os.environ.get(key_env)
    if not key and not options.get("embedder_base_url"):
        raise ValueError(f"embedder=openai calls {base_url or 'OpenAI'}'s embeddings API: set ${key_env} (or tool "
                         "option embedder_base_url for another OpenAI-compatible server)")
    instruction = options.get("embedder_query_instruction")
    if instruction is None and instructed:
        instruction = _qwen_instruction(domain_folder)
    return APIEmbedder(OpenAI(base_url=base_url, api_key=key or "EMPTY"), options.get("embedder_model") or model,
                       instruction or None, "float" if provider == "openrouter" else None)


def _qwen_instruction(domain_folder: Path) -> str:
    found = clone_constant(domain_folder, INSTRUCTION_SOURCE, INSTRUCTION_NAME)
    if found is not None:
        return found
    raise ValueError(f"embedder=openai for a Qwen variant sends queries with Qwen's instruction, read from your "
                     f"τ²-bench clone ({INSTRUCTION_SOURCE}), but none is above {domain_folder}: point env.data_dir "
                     "into the clone, or give tool option embedder_query_instruction")
