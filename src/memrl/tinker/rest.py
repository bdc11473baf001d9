"""The read-mostly REST side of the SDK (``RestClient``): training runs, their checkpoints, weights info.

These read the state folder, not memory, so a restarted server lists every run and checkpoint an
earlier one wrote. Shapes follow the SDK's ``TrainingRun``, ``Checkpoint`` and ``WeightsInfoResponse``.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI, Request

from memrl.serve.errors import APIError
from memrl.tinker import checkpoints as ckpt
from memrl.tinker import schemas as s


def _run(svc: Any, info: dict[str, Any]) -> dict[str, Any]:
    model_id = info["training_run_id"]
    points = ckpt.list_checkpoints(svc.state_dir, model_id)
    train = [c for c in points if c["checkpoint_type"] == "training"]
    sampler = [c for c in points if c["checkpoint_type"] == "sampler"]
    last = max([info.get("created", 0.0)] + [_epoch(c["time"]) for c in points])
    return {"training_run_id": model_id, "base_model": info.get("base_model", ""), "model_owner": "local",
            "is_lora": True, "corrupted": False, "lora_rank": info.get("lora_rank"),
            "last_request_time": ckpt.iso_time(last), "last_checkpoint": train[-1] if train else None,
            "last_sampler_checkpoint": sampler[-1] if sampler else None,
            "user_metadata": info.get("user_metadata") or None}


def _epoch(iso: str) -> float:
    import calendar

    return float(calendar.timegm(time.strptime(iso, "%Y-%m-%dT%H:%M:%SZ")))


def _run_info(svc: Any, model_id: str) -> dict[str, Any]:
    try:
        info = ckpt.read_json(ckpt.run_dir(svc.state_dir, model_id) / "run.json")
    except ckpt.CheckpointError:
        info = None
    if info is None:
        raise APIError(404, f"unknown training run {model_id!r}", param="training_run_id")
    return info


def weights_info(svc: Any, path: str) -> dict[str, Any]:
    try:
        _, _, folder = ckpt.folder_of(svc.state_dir, path)
    except ckpt.CheckpointError as exc:
        raise APIError(404, str(exc), param="tinker_path") from None
    meta = ckpt.read_json(folder / "meta.json") or {}
    lora = meta.get("lora") or {}
    return {"base_model": meta.get("base_model", ""), "optimizer_config": {"type": "adamw"}, "is_lora": True,
            "lora_rank": lora.get("rank"), "train_unembed": lora.get("train_unembed"),
            "train_mlp": lora.get("train_mlp"), "train_attn": lora.get("train_attn")}


# RestClient / AdminClient calls this server does not serve: (method, path, why), each a one-line 400 rather than
# FastAPI's bare 404/405.
_CHECKPOINT = "/api/v1/training_runs/{model_id}/checkpoints/{checkpoint_id:path}"
NOT_SERVED_REST: tuple[tuple[str, str, str], ...] = (
    ("GET", _CHECKPOINT + "/external_weights_urls", "signed download URLs are not served: the checkpoint is a "
                                                    "folder under --state-dir (adapter.safetensors, meta.json)"),
    ("GET", "/api/v1/sessions", "listing sessions is not served (sessions live in the server's memory only)"),
    ("POST", "/api/v1/sessions/search", "searching sessions is not served"),
    ("GET", "/api/v1/sessions/{session_id}", "session details are not served"),
    ("PUT", "/api/v1/sessions/{session_id}/project", "projects are not served (one local state folder)"),
    ("GET", "/api/v1/sessions/{session_id}/trace_export", "session traces are not served; run with --access-log "
                                                          "for a log of requests"),
    ("GET", "/api/v1/audit", "audit logs are not served"),
    ("GET", "/api/v1/billing/usage/events", "billing is not served"),
    ("GET", "/api/v1/billing/usage/checkpoints/current", "storage usage is not served: see the size of --state-dir"),
)


def _refusals(app: FastAPI) -> None:
    for method, path, why in NOT_SERVED_REST:
        app.add_api_route(path, refusal(why), methods=[method])


def _publish(svc: Any, model_id: str, checkpoint_id: str, public: bool) -> None:
    """Set the listing's ``public`` flag. Setting it as it is answers 200: the service's 409 would have the SDK
    retry it for five minutes (it retries every 409) before the script fails."""
    try:
        ckpt.set_public(svc.state_dir, model_id, checkpoint_id, public)
    except ckpt.CheckpointError as exc:
        raise APIError(404, str(exc), param="checkpoint_id") from None


def refusal(why: str) -> Any:
    """A route answering every request with a one-line 400 ``not_served`` saying ``why``."""
    async def refuse() -> None:
        raise APIError(400, why, code="not_served")
    return refuse


def add_rest_routes(app: FastAPI, svc: Any) -> None:
    """``/api/v1/training_runs``, ``/api/v1/checkpoints``, ``/api/v1/weights_info``, checkpoint deletion."""

    @app.get("/api/v1/training_runs")
    async def list_runs(limit: int = 20, offset: int = 0) -> dict[str, Any]:
        runs = sorted(ckpt.list_runs(svc.state_dir), key=lambda r: -float(r.get("created", 0.0)))
        page = runs[offset: offset + max(0, limit)]
        return {"training_runs": [_run(svc, r) for r in page],
                "cursor": {"offset": offset, "limit": limit, "total_count": len(runs)}}

    @app.get("/api/v1/training_runs/{model_id}")
    async def get_run(model_id: str) -> dict[str, Any]:
        return _run(svc, _run_info(svc, model_id))

    @app.get("/api/v1/training_runs/{model_id}/checkpoints")
    async def run_checkpoints(model_id: str) -> dict[str, Any]:
        _run_info(svc, model_id)
        return {"checkpoints": ckpt.list_checkpoints(svc.state_dir, model_id)}

    _refusals(app)

    # before the checkpoint-delete route, which would read "weights/x/publish" as a checkpoint name
    @app.post(_CHECKPOINT + "/publish")
    async def publish(model_id: str, checkpoint_id: str) -> None:
        _publish(svc, model_id, checkpoint_id, True)

    @app.delete(_CHECKPOINT + "/publish")
    async def unpublish(model_id: str, checkpoint_id: str) -> None:
        _publish(svc, model_id, checkpoint_id, False)

    @app.put("/api/v1/training_runs/{model_id}/checkpoints/{checkpoint_id:path}/ttl")
    async def set_ttl(model_id: str, checkpoint_id: str, body: s.CheckpointTtl) -> None:
        try:
            ckpt.set_ttl(svc.state_dir, model_id, checkpoint_id, body.ttl_seconds)
        except ckpt.CheckpointError as exc:
            raise APIError(404, str(exc), param="checkpoint_id") from None

    @app.delete("/api/v1/training_runs/{model_id}/checkpoints/{checkpoint_id:path}")
    async def delete_checkpoint(model_id: str, checkpoint_id: str) -> None:
        try:
            ckpt.delete(svc.state_dir, model_id, checkpoint_id)
        except ckpt.CheckpointError as exc:
            raise APIError(404, str(exc), param="checkpoint_id") from None

    @app.get("/api/v1/checkpoints")
    async def all_checkpoints(limit: int = 100, offset: int = 0) -> dict[str, Any]:
        points = [c for r in ckpt.list_runs(svc.state_dir)
                  for c in ckpt.list_checkpoints(svc.state_dir, r["training_run_id"])]
        return {"checkpoints": points[offset: offset + max(0, limit)],
                "cursor": {"offset": offset, "limit": limit, "total_count": len(points)}}

    @app.post("/api/v1/weights_info")
    async def info(body: s.WeightsInfo) -> dict[str, Any]:
        return weights_info(svc, body.tinker_path)

    @app.post("/api/v1/sessions/{session_id}/finish")
    async def finish(session_id: str, request: Request) -> None:
        svc.finish_session(session_id)
