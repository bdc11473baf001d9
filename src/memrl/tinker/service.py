"""The server's state and its training operations: sessions, LoRA training runs, and their requests.

``TinkerService`` owns the model host, the futures, the worker and the registries. A route checks a
request here (unknown model, wrong base model, a loss that is not served, a batch past the limits:
answered 400 at once, naming the field) and submits the work as a job whose future the client polls.
Model ids follow the SDK's own derivation, ``<session_id>:train:<model_seq_id>`` (it computes the id
itself for ``create_training_client_from_state``), and session ids are random, so ids and checkpoint
folders never collide across restarts. A finished session (``ServiceClient.close``, or no heartbeat
for ``session_ttl_s``) releases its adapters and optimizer state; its checkpoints stay on disk.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from memrl.serve.errors import APIError
from memrl.tinker import checkpoints as ckpt
from memrl.tinker import schemas as s
from memrl.tinker.compute import adam_step, run_datums
from memrl.tinker.futures import FutureStore
from memrl.tinker.limits import TinkerLimits, check_datums, check_loss
from memrl.tinker.tenants import LoraSpec, ModelHost, load_optimizer_state, optimizer_state
from memrl.tinker.wire import FwdBwdRequest, encode_forward_backward
from memrl.tinker.worker import Job, Result, Worker


@dataclass
class Session:
    session_id: str
    created: float = field(default_factory=time.time)
    last_seen: float = field(default_factory=time.monotonic)
    finished: bool = False
    models: list[str] = field(default_factory=list)
    samplers: list[str] = field(default_factory=list)


@dataclass
class Tenant:
    """One LoRA training run: its adapter on the shared model and its own AdamW."""

    model_id: str
    session_id: str
    adapter: str
    lora: LoraSpec
    params: dict[str, torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    user_metadata: dict[str, Any] | None = None


def new_optimizer(params: dict[str, torch.nn.Parameter]) -> torch.optim.Optimizer:
    """AdamW over one adapter; every ``optim_step`` sets its hyperparameters (Tinker's defaults here)."""
    return torch.optim.AdamW(list(params.values()), lr=1e-4, betas=(0.9, 0.95), eps=1e-12, weight_decay=0.0)


class TinkerService:
    """Sessions, training runs and samplers on one base model; requests run on one worker."""

    def __init__(self, host: ModelHost, engine: Any, *, base_name: str, aliases: set[str], tokenizer_id: str,
                 state_dir: Path, limits: TinkerLimits, poll_s: float = 30.0, session_ttl_s: float = 120.0) -> None:
        from memrl.tinker.samplers import run_sample_group

        self.host, self.engine = host, engine
        self.base_name, self.aliases, self.tokenizer_id = base_name, aliases | {base_name}, tokenizer_id
        self.state_dir, self.limits = Path(state_dir), limits
        self.poll_s, self.session_ttl_s = poll_s, session_ttl_s
        self.futures = FutureStore()
        self.worker = Worker(self.futures, lambda key, jobs: run_sample_group(self, key, jobs))
        self.sessions: dict[str, Session] = {}
        self.tenants: dict[str, Tenant] = {}
        self.samplers: dict[str, Any] = {}  # sampler id -> samplers.Sampler
        self.sampler_keys: dict[Hashable, str] = {}

    # -- sessions ------------------------------------------------------------------
    def create_session(self, body: s.CreateSession) -> str:
        self._expire_sessions()
        sid = f"s-{secrets.token_hex(4)}"
        self.sessions[sid] = Session(sid)
        return sid

    def session(self, session_id: str) -> Session:
        sess = self.sessions.get(session_id)
        if sess is None:
            raise APIError(404, f"unknown session_id {session_id!r} (sessions do not survive a server restart)",
                           param="session_id")
        if sess.finished:
            raise APIError(410, f"session {session_id} is finished", param="session_id")
        sess.last_seen = time.monotonic()
        return sess

    def finish_session(self, session_id: str) -> None:
        sess = self.sessions.get(session_id)
        if sess is None or sess.finished:
            return
        sess.finished = True
        for model_id in sess.models:
            tenant = self.tenants.pop(model_id, None)
            if tenant is not None and not self.worker.stopping:
                self.worker.submit(Job(f"release-{model_id}", lambda a=tenant.adapter: self._release(a)))
        for sampler_id in sess.samplers:
            self.samplers.pop(sampler_id, None)
            self.host.forget_sampler(sampler_id)
        # its samples, queued or decoding: a client that died mid-sample held the one worker for minutes
        self.worker.cancel_where(lambda job: job.group is not None and job.payload[0].session_id == session_id)

    async def _release(self, adapter: str) -> Result:
        self.host.remove_adapter(adapter)
        return Result(json=None)

    def _expire_sessions(self) -> None:
        now = time.monotonic()
        for sess in list(self.sessions.values()):
            if not sess.finished and now - sess.last_seen > self.session_ttl_s:
                self.finish_session(sess.session_id)

    # -- the base model ------------------------------------------------------------
    def check_base_model(self, name: str | None, field_name: str = "base_model") -> None:
        if name is not None and name not in self.aliases:
            raise APIError(400, f"{field_name}: {name!r} is not served here; this server loads {self.base_name!r} "
                                "(restart memrl tinker with --model to serve another)", param=field_name)

    def serves(self, meta: dict[str, Any]) -> bool:
        """Whether a checkpoint fits this base model: saved under one of its names, or from the same folder (its
        ``base_path``: the server started under another alias, or a relative path from another directory)."""
        return meta.get("base_model") in self.aliases or meta.get("base_path") == self.tokenizer_id

    def capabilities(self) -> dict[str, Any]:
        return {"supported_models": [{"model_name": self.base_name, "max_context_length": self.limits.max_model_len,
                                      "trainable": True, "sampleable": True}]}

    # -- training runs ----------------------------------------------------------------
    def tenant(self, model_id: str) -> Tenant:
        tenant = self.tenants.get(model_id)
        if tenant is None:
            raise APIError(404, f"unknown model_id {model_id!r} (training clients do not survive a restart: "
                                "create one from a saved state)", param="model_id")
        self.sessions[tenant.session_id].last_seen = time.monotonic()
        return tenant

    def submit(self, kind: str, dedupe: Hashable | None, run: Callable[[], Awaitable[Result]]) -> str:
        if self.worker.stopping:
            raise APIError(503, "the server is stopping", code="stopping")
        rid, new = self.futures.create(kind, dedupe)
        if new:
            self.worker.submit(Job(rid, run))
        return rid

    def _check_room(self) -> None:
        self._expire_sessions()
        if len(self.tenants) >= self.limits.max_loras:
            raise APIError(400, f"{len(self.tenants)} LoRA training clients are live, at most {self.limits.max_loras} "
                                "(--max-loras); close a ServiceClient to free its clients", param="model_seq_id")

    def create_model(self, body: s.CreateModel) -> str:
        self.session(body.session_id)
        self.check_base_model(body.base_model)
        if body.lora_config is None:
            raise APIError(400, "lora_config: full fine-tuning is not served; create a LoRA training client",
                           param="lora_config")
        _check_optimizer(body.optimizer_config)
        model_id = _new_model_id(self.state_dir, body.session_id, body.model_seq_id)
        if model_id not in self.tenants:
            self._check_room()
        lora = LoraSpec(**body.lora_config.model_dump())

        async def run() -> Result:
            await self._add_tenant(model_id, body.session_id, lora, body.user_metadata)
            return Result(json={"model_id": model_id, "type": "create_model"})

        return self.submit("create_model", ("create", model_id), run)

    async def _add_tenant(self, model_id: str, session_id: str, lora: LoraSpec,
                          user_metadata: dict[str, Any] | None) -> Tenant:
        if model_id in self.tenants:
            raise ValueError(f"model {model_id} exists already")
        adapter = self.host.new_name("t")
        params = await asyncio.to_thread(self.host.add_adapter, adapter, lora)
        try:  # the run's record first: a client is registered (and holds a --max-loras slot) only once it exists
            ckpt.write_run(self.state_dir, model_id, {
                "training_run_id": model_id, "base_model": self.base_name, "base_path": self.tokenizer_id,
                "is_lora": True, "lora_rank": lora.rank,
                "lora": lora.to_dict(), "created": time.time(), "user_metadata": user_metadata})
        except BaseException:
            self.host.remove_adapter(adapter)
            raise
        tenant = Tenant(model_id, session_id, adapter, lora, params, new_optimizer(params), user_metadata)
        self.tenants[model_id] = tenant
        self.sessions[session_id].models.append(model_id)
        return tenant

    def info(self, model_id: str) -> dict[str, Any]:
        tenant = self.tenant(model_id)
        arch = (getattr(self.host.model.config, "architectures", None) or ["unknown"])[0]
        return {"type": "get_info", "model_id": model_id, "is_lora": True, "lora_rank": tenant.lora.rank,
                "model_name": self.base_name, "optimizer_config": {"type": "adamw"},
                "model_data": {"arch": arch, "model_name": self.base_name, "tokenizer_id": self.tokenizer_id}}

    def forward_backward(self, req: FwdBwdRequest) -> str:
        tenant = self.tenant(req.model_id)
        check_loss(req.loss_fn)
        check_datums(req.data, self.limits)

        def work() -> Result:
            with self.host.active(tenant.adapter) as model:
                out = run_datums(model, req.data, req.loss_fn, dict(req.config), backward=not req.forward_only,
                                 micro_tokens=self.limits.micro_tokens)
            return Result(proto=encode_forward_backward(out.outputs, out.metrics))

        async def run() -> Result:
            self._alive(tenant)
            return await asyncio.to_thread(work)

        kind = "forward" if req.forward_only else "forward_backward"
        return self.submit(kind, _key(req.model_id, req.seq_id), run)

    def optim_step(self, body: s.OptimStep) -> str:
        tenant = self.tenant(body.model_id)
        params = body.optim_params or body.adam_params or body.optimizer_params or s.AdamParamsBody()
        if params.type not in (None, "adamw", "adam"):
            raise APIError(400, f"optim_params: optimizer {params.type!r} is not served (AdamW only)",
                           param="optim_params")
        hp = params.model_dump(exclude={"type"})

        async def run() -> Result:
            self._alive(tenant)
            metrics = await asyncio.to_thread(adam_step, tenant.optimizer, list(tenant.params.values()), hp)
            return Result(json={"metrics": metrics})

        return self.submit("optim_step", _key(body.model_id, body.seq_id), run)

    def _alive(self, tenant: Tenant) -> None:
        if self.tenants.get(tenant.model_id) is not tenant:
            raise ValueError(f"model {tenant.model_id} was released (its session finished)")

    # -- weights ------------------------------------------------------------------------
    def save_weights(self, body: s.SaveWeights) -> str:
        """``save_state``: adapter + optimizer under ``tinker://<model>/weights/<name>``."""
        tenant = self.tenant(body.model_id)
        name = _name(body.path, body.seq_id)

        async def run() -> Result:
            self._alive(tenant)
            path = await asyncio.to_thread(
                ckpt.save, self.state_dir, tenant.model_id, "weights", name, self.host.state(tenant.adapter),
                optimizer_state(tenant.optimizer, tenant.params), self._meta(tenant, body), body.overwrite)
            await asyncio.to_thread(ckpt.expire, self.state_dir)
            return Result(json={"path": path, "type": "save_weights"})

        return self.submit("save_weights", _key(body.model_id, body.seq_id), run)

    def save_for_sampler(self, body: s.SaveWeights) -> str:
        """A named sampler checkpoint on disk, or (no name) an in-memory snapshot answered as a sampler id."""
        from memrl.tinker.samplers import Sampler, add_sampler

        tenant = self.tenant(body.model_id)
        if body.path is None and body.sampling_session_seq_id is None:
            raise APIError(400, "path or sampling_session_seq_id is required", param="path")
        if body.kind != "snapshot":  # inflight: clients whose weights later saves change; memrl's stay as saved
            raise APIError(400, f"kind: {body.kind!r} is not served here; memrl's sampling clients are snapshots "
                                "(leave kind out, and save again for newer weights)", param="kind")
        name = None if body.path is None else _name(body.path, body.seq_id)

        async def run() -> Result:
            self._alive(tenant)
            weights = self.host.state(tenant.adapter)
            if name is None:
                sid = f"{tenant.session_id}:sample:{body.sampling_session_seq_id}"
                add_sampler(self, Sampler(sid, tenant.session_id, None, tenant.lora, weights))
                return Result(json={"sampling_session_id": sid, "type": "save_weights_for_sampler"})
            path = await asyncio.to_thread(ckpt.save, self.state_dir, tenant.model_id, "sampler_weights", name,
                                           weights, None, self._meta(tenant, body), True)
            await asyncio.to_thread(ckpt.expire, self.state_dir)
            return Result(json={"path": path, "type": "save_weights_for_sampler"})

        return self.submit("save_weights_for_sampler", _key(body.model_id, body.seq_id), run)

    def _meta(self, tenant: Tenant, body: s.SaveWeights) -> dict[str, Any]:
        """The checkpoint's meta.json fields (``ttl_seconds`` becomes its ``expires_at`` when saved)."""
        return {"model_id": tenant.model_id, "base_model": self.base_name, "base_path": self.tokenizer_id,
                "lora": tenant.lora.to_dict(),
                "user_metadata": body.user_metadata, "ttl_seconds": body.ttl_seconds}

    def load_weights(self, body: s.LoadWeights) -> str:
        """``load_state*`` into an existing run, or ``create_training_client_from_state*`` (a new run)."""
        try:
            _, kind, folder = ckpt.folder_of(self.state_dir, body.path)
        except ckpt.CheckpointError as exc:
            raise APIError(400, str(exc), param="path") from None
        if body.optimizer and kind != "weights":
            raise APIError(400, f"path: {body.path} is a sampler checkpoint; it has no optimizer state", param="path")
        if body.model_id is not None:
            tenant = self.tenant(body.model_id)
            model_id, session_id, dedupe = tenant.model_id, tenant.session_id, _key(body.model_id, body.seq_id)
        elif body.session_id is not None and body.model_seq_id is not None:
            self.session(body.session_id)
            self.check_base_model(body.base_model)
            _check_optimizer(body.optimizer_config)
            model_id, session_id = _new_model_id(self.state_dir, body.session_id, body.model_seq_id), body.session_id
            dedupe = ("create", model_id)
            self._check_room()
        else:
            raise APIError(400, "model_id, or session_id with model_seq_id, is required", param="model_id")

        async def run() -> Result:
            meta, tensors, opt = await asyncio.to_thread(ckpt.load, folder)
            if not self.serves(meta):
                raise ValueError(f"{body.path} was trained on {meta.get('base_model')!r}; this server loads "
                                 f"{self.base_name!r}")
            lora = LoraSpec.from_dict(meta.get("lora") or {})
            tenant = self.tenants.get(model_id)
            if tenant is None:
                tenant = await self._add_tenant(model_id, session_id, lora, body.user_metadata)
            if tenant.lora.to_dict() | {"seed": None} != lora.to_dict() | {"seed": None}:
                raise ValueError(f"{body.path} has LoRA {lora}, this training client {tenant.lora}")
            await asyncio.to_thread(self.host.load_state, tenant.adapter, tensors)
            tenant.optimizer = new_optimizer(tenant.params)
            if body.optimizer and opt is not None:
                load_optimizer_state(tenant.optimizer, tenant.params, opt)
            return Result(json={"path": body.path, "model_id": model_id, "type": "load_weights"})

        return self.submit("load_weights", dedupe, run)


def _check_optimizer(cfg: s.OptimizerConfigBody | None) -> None:
    if cfg is not None and cfg.type not in ("adamw", "adam"):
        raise APIError(400, f"optimizer_config: {cfg.type!r} is not served (AdamW only)", param="optimizer_config")


def _key(model_id: str, seq_id: int | None) -> Hashable | None:
    """The retry identity of a training request: the SDK resends the same ``(model, seq_id)``."""
    return None if seq_id is None else (model_id, seq_id)


def _name(path: str | None, seq_id: int | None) -> str:
    """The checkpoint name (Tinker's ``path`` field); a bare save gets one from its ``seq_id``."""
    name = path if path is not None else f"step-{seq_id or 0:06d}"
    try:
        return ckpt.check_name(name)
    except ckpt.CheckpointError as exc:
        raise APIError(400, str(exc), param="path") from None


def _new_model_id(state_dir: Path, session_id: str, seq_id: int) -> str:
    """The SDK's id of a new training client, checked before any work (it names the run's folder)."""
    model_id = f"{session_id}:train:{seq_id}"
    try:
        ckpt.run_dir(state_dir, model_id)
    except ckpt.CheckpointError as exc:
        raise APIError(400, str(exc), param="model_seq_id") from None
    return model_id
