"""Samplers: the weights a ``SamplingClient`` samples from, and the ``asample`` requests against them.

A sampler is the base model (``create_sampling_client(base_model=...)``), a checkpoint on disk
(``model_path=tinker://...``, either kind), or a snapshot of a training run's adapter taken by
``save_weights_and_get_sampling_client`` (kept in memory only, as Tinker's are ephemeral; the
``MAX_SAMPLERS`` most recently used that hold weights are kept). Its weights live on the CPU and
become a peft adapter when sampled (``ModelHost.sampler_adapter``). Sampler ids are
``<session_id>:sample:<seq>``, the SDK's counter.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import torch

from memrl.serve.errors import APIError
from memrl.tinker import checkpoints as ckpt
from memrl.tinker import schemas as s
from memrl.tinker.limits import check_sampling
from memrl.tinker.sampling import SampleJob, engine_params, eos_ids, run_group, stops
from memrl.tinker.tenants import LoraSpec
from memrl.tinker.wire import bad, encode_sample
from memrl.tinker.worker import Job, Result

MAX_SAMPLERS = 256


@dataclass
class Sampler:
    """Weights to sample from: ``weights is None`` means the base model."""

    sampler_id: str
    session_id: str
    model_path: str | None
    lora: LoraSpec | None
    weights: dict[str, torch.Tensor] | None
    clients: int = 0


def add_sampler(svc: Any, sampler: Sampler) -> None:
    """Register a sampler under its session. Past ``MAX_SAMPLERS`` samplers that hold weights, the least recently
    used go (``svc.samplers`` is kept in order of use); base-model samplers hold none and always stay. Dropping
    the oldest by creation ended RL loops at step ~256: a KL reference or teacher sampler made once and used
    every step was dropped under the step's new snapshots."""
    svc.samplers[sampler.sampler_id] = sampler
    sess = svc.sessions.get(sampler.session_id)
    if sess is not None:
        sess.samplers.append(sampler.sampler_id)
    held = [sid for sid, found in svc.samplers.items() if found.weights is not None]
    for old in held[:max(0, len(held) - MAX_SAMPLERS)]:
        svc.samplers.pop(old)
        svc.host.forget_sampler(old)


async def create_sampling_session(svc: Any, body: s.CreateSamplingSession) -> str:
    """A sampler for ``model_path`` (loaded from disk now) or ``base_model``; the same id on a resend."""
    svc.session(body.session_id)
    sid = f"{body.session_id}:sample:{body.sampling_session_seq_id}"
    if sid in svc.samplers:
        return sid
    if (body.model_path is None) == (body.base_model is None):
        raise APIError(400, "exactly one of model_path and base_model is required", param="model_path")
    if body.base_model is not None:
        svc.check_base_model(body.base_model)
        add_sampler(svc, Sampler(sid, body.session_id, None, None, None))
        return sid
    meta, weights = await asyncio.to_thread(_load, svc, body.model_path)
    add_sampler(svc, Sampler(sid, body.session_id, body.model_path, LoraSpec.from_dict(meta.get("lora") or {}),
                             weights))
    return sid


def _load(svc: Any, path: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    try:
        _, _, folder = ckpt.folder_of(svc.state_dir, path)
        meta, weights, _ = ckpt.load(folder)
    except ckpt.CheckpointError as exc:
        raise APIError(400, str(exc), param="model_path") from None
    if not svc.serves(meta):
        raise APIError(400, f"model_path: {path} was trained on {meta.get('base_model')!r}; this server loads "
                            f"{svc.base_name!r}", param="model_path")
    return meta, weights


def sampler(svc: Any, sampler_id: str) -> Sampler:
    """The sampler named ``sampler_id``, now the most recently used (a 404 if it is unknown or was dropped)."""
    found = svc.samplers.pop(sampler_id, None)
    if found is None:
        raise APIError(404, f"unknown sampling_session_id {sampler_id!r} (samplers do not survive a restart; past "
                            f"{MAX_SAMPLERS} with weights, the least recently used are dropped)",
                       param="sampling_session_id")
    svc.samplers[sampler_id] = found
    return found


def sampler_info(svc: Any, sampler_id: str) -> dict[str, Any]:
    found = sampler(svc, sampler_id)
    return {"sampler_id": found.sampler_id, "base_model": svc.base_name, "model_path": found.model_path}


def join(svc: Any, sampler_id: str) -> int:
    """A fresh client number for an unpickled ``SamplingClient`` (its request ids then never collide)."""
    found = sampler(svc, sampler_id)
    found.clients += 1
    return found.clients


def _resolve_sampler(svc: Any, body: s.Sample) -> Sampler:
    if body.sampling_session_id is not None:
        return sampler(svc, body.sampling_session_id)
    if body.model_path is not None:  # the old, session-less form: one request, one sampler
        meta, weights = _load(svc, body.model_path)
        return Sampler(f"path:{body.model_path}", "", body.model_path, LoraSpec.from_dict(meta.get("lora") or {}),
                       weights)
    svc.check_base_model(body.base_model or svc.base_name)
    return Sampler("base", "", None, None, None)


def _job(svc: Any, body: s.Sample) -> SampleJob:
    if body.target_prompt_logprobs is not None:
        raise bad("target_prompt_logprobs", "is not served by memrl tinker")
    if body.prompt_alt_tokens_k:
        raise bad("prompt_alt_tokens_k", "is not served by memrl tinker")
    prompt = []
    for k, chunk in enumerate(body.prompt.chunks):
        if chunk.type != "encoded_text":
            raise bad(f"prompt.chunks[{k}]", f"{chunk.type} chunks are not served (token chunks only)")
        prompt += chunk.tokens
    sp = body.sampling_params
    max_tokens = check_sampling(prompt, body.num_samples, sp.max_tokens, sp.temperature, sp.top_p, sp.top_k,
                                svc.limits, sp.seed)
    if body.prompt_logprobs_last_n is not None and not 1 <= body.prompt_logprobs_last_n <= len(prompt) - 1:
        raise bad("prompt_logprobs_last_n", f"must be between 1 and len(prompt) - 1 = {len(prompt) - 1}")
    for name in ("topk_prompt_logprobs", "topk_sample_logprobs"):
        if not 0 <= getattr(body, name) <= 100:
            raise bad(name, "must be between 0 and 100")
    tokenizer = svc.host.tokenizer
    try:
        stop_ids, strings = stops(sp.stop, tokenizer, eos_ids(tokenizer, svc.host.model))
    except ValueError as exc:
        raise bad("sampling_params.stop", str(exc).split(": ", 1)[-1]) from None
    params = engine_params({**sp.model_dump(), "max_tokens": max_tokens}, body.num_samples, stop_ids,
                           body.topk_sample_logprobs, strings)
    return SampleJob(prompt, params, strings, bool(body.prompt_logprobs), body.prompt_logprobs_last_n,
                     body.topk_prompt_logprobs)


def submit_sample(svc: Any, body: s.Sample) -> dict[str, Any]:
    """Queue an ``asample``; the answer carries one sequence id per sample, as the SDK expects.

    ``record_stability_info`` is refused here, at the first sample, rather than after a whole batch
    of sampling when the ``stable_reinforce`` step it exists for would be refused.
    """
    if body.record_stability_info:
        raise APIError(400, "record_stability_info: loss_fn 'stable_reinforce' is not served, so its stability "
                            "records are not kept; sample without them and train with "
                            "loss_fn='importance_sampling' (cookbook rl_loop: loss_fn=importance_sampling)",
                       param="record_stability_info")
    found = _resolve_sampler(svc, body)
    job = _job(svc, body)
    if svc.worker.stopping:
        raise APIError(503, "the server is stopping", code="stopping")
    dedupe = None if body.seq_id is None or body.sampling_session_id is None else (found.sampler_id, body.seq_id)
    rid, new = svc.futures.create("sample", dedupe)
    if new:
        svc.worker.submit(Job(rid, group=("sample", found.sampler_id), payload=(found, job)))
    return {"request_id": rid, "sample_sequence_ids": [f"{rid}/{i}" for i in range(body.num_samples)]}


async def run_sample_group(svc: Any, key: Hashable, jobs: list[Job]) -> list[Any]:
    """Sample every queued request for one sampler as one batch, its weights active on the model."""
    found: Sampler = jobs[0].payload[0]
    host = svc.host
    adapter = None
    if found.weights is not None:
        assert found.lora is not None
        adapter = host.sampler_adapter(found.sampler_id, found.lora, found.weights)
    with host.active(adapter) as model:
        outcomes = await run_group(svc.engine, model, host.tokenizer, [j.payload[1] for j in jobs],
                                   started=lambda i, task: svc.worker.track(jobs[i], task))
    if found.sampler_id.startswith("path:"):  # a one-off sampler: do not keep its adapter
        host.drop_sampler(found.sampler_id)
    return [o if isinstance(o, BaseException) else Result(proto=await asyncio.to_thread(encode_sample, *o))
            for o in outcomes]
