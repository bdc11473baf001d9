"""Start ``memrl tinker``: check the flags, load the model once, resolve the API key, serve until Ctrl-C.

Everything a user can get wrong (a port in use, ``--engine vllm``, a key the SDK would refuse) is
refused in one line before the model loads. The key comes from ``--api-key`` or
``MEMRL_TINKER_API_KEY``; with neither, one is generated and printed once (it is never logged
otherwise). Ctrl-C (or SIGTERM) stops taking requests, answers the pending polls, fails the queued
requests, lets the running one finish (a checkpoint being written is completed or not there at all),
and exits; a new server on the same ``--state-dir`` finds every saved checkpoint by its path.
"""

from __future__ import annotations

import os
import secrets
import sys
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

from memrl.serve.server import AnnouncingServer, bind_socket, check_port, url_of
from memrl.tinker import checkpoints as ckpt
from memrl.tinker.limits import TinkerLimits
from memrl.tinker.service import TinkerService

KEY_ENV = "MEMRL_TINKER_API_KEY"


def resolve_key(api_key: str | None) -> tuple[str, bool]:
    """``(key, generated)``: the given key (``--api-key``, else ``$MEMRL_TINKER_API_KEY``) or a new one."""
    key = api_key or os.environ.get(KEY_ENV) or None
    if key is None:
        return "tml-" + secrets.token_urlsafe(24), True
    if not key.startswith("tml-"):
        raise ValueError("--api-key: the tinker SDK sends only keys that start with 'tml-' (e.g. tml-local-123)")
    if len(key) < 8:
        raise ValueError("--api-key: use at least 8 characters")
    return key, False


SERVED_ENGINES = ("hf",)  # engine kinds memrl tinker samples with (see check_engine)


def check_engine(engine: str) -> None:
    """Only ``hf``: samplers are LoRA adapters, and vLLM's LoRA (0.32) adapts the output head, which Tinker's
    ``train_unembed`` (on by default) trains, only for some architectures (Llama and Qwen3 yes; Qwen2, Mistral,
    Gemma 2 no); loading such an adapter there stops the whole vLLM engine."""
    if engine not in SERVED_ENGINES:
        raise ValueError(f"--engine {engine}: memrl tinker trains and samples one in-process transformers model "
                         "(--engine hf); vLLM is not served here (its LoRA adapts the output head, which Tinker's "
                         "train_unembed trains by default, only for some architectures)")


def build_service(model: str, state_dir: str | Path, *, dtype: str = "auto", device: str | None = None,
                  lora_alpha: float = 32.0, limits: dict[str, int] | None = None,
                  poll_s: float = 30.0, session_ttl_s: float = 120.0) -> TinkerService:
    """Load ``model`` (folder, hub id or alias), wrap it for LoRA tenants, and build the service."""
    from memrl.engines.hf import HFEngine
    from memrl.models.resolve import load_model, load_tokenizer, resolve_model_path
    from memrl.serve.limits import model_window
    from memrl.tinker.tenants import ModelHost

    resolved = resolve_model_path(model)
    # The model answers to the name it was served under (scripts compare get_info's model_name with the
    # base_model they asked for); its tokenizer is named by the folder's absolute path, so the SDK's
    # get_tokenizer() loads it without the hub.
    name = str(Path(resolved).resolve()) if Path(resolved).is_dir() else model
    tokenizer = load_tokenizer(model, field="--model")  # first: its failure is the cheaper one
    net = load_model(model, dtype=dtype, device=device, field="--model")
    window = model_window(net)
    if window is None:
        raise ValueError(f"--model {model}: its config declares no max_position_embeddings")
    host = ModelHost(net, tokenizer, lora_alpha=lora_alpha)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else None
    engine = HFEngine(host.model, pad_token_id=pad, tokenizer=tokenizer)
    vocab = int(host.model.get_input_embeddings().num_embeddings)
    lim = replace(TinkerLimits(max_model_len=window, vocab_size=vocab), **(limits or {}))
    Path(state_dir).mkdir(parents=True, exist_ok=True)
    for folder in ckpt.recover(Path(state_dir)):
        print(f"memrl tinker: {folder}: put back the checkpoint an interrupted overwrite had set aside",
              file=sys.stderr, flush=True)
    for folder in ckpt.expire(Path(state_dir)):
        print(f"memrl tinker: {folder}: deleted, its ttl_seconds ran out", file=sys.stderr, flush=True)
    return TinkerService(host, engine, base_name=model, aliases={model, resolved, name}, tokenizer_id=name,
                         state_dir=Path(state_dir), limits=lim, poll_s=poll_s, session_ttl_s=session_ttl_s)


class _Server(AnnouncingServer):
    """memrl serve's server, saying on a signal that pending polls are answered and queued requests fail."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        print("memrl tinker: stopping (the running request finishes, queued ones fail)", file=sys.stderr, flush=True)
        super().handle_exit(sig, frame)


def serve(model: str, *, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
          state_dir: str = "runs/tinker", engine: str = "hf", dtype: str = "auto", lora_alpha: float = 32.0,
          limits: dict[str, int] | None = None, access_log: bool = False, session_ttl_s: float = 120.0) -> None:
    """Serve the Tinker API for ``model`` (blocking)."""
    from memrl.data.outdir import check_writable_dir
    from memrl.data.runlock import hold_folder
    from memrl.tinker.wire import require_sdk

    check_port(port)
    check_engine(engine)
    check_writable_dir(Path(state_dir), flag="--state-dir")  # before the model loads, not after
    key, generated = resolve_key(api_key)
    require_sdk()
    # one server per --state-dir: a second one's start-up clean-up would delete the first's saves in flight
    with hold_folder(Path(state_dir), "memrl tinker", "--state-dir",
                     lambda msg: print(f"memrl tinker: {msg}", file=sys.stderr, flush=True)):
        _serve_held(model, host, port, key, generated, state_dir, dtype=dtype, lora_alpha=lora_alpha, limits=limits,
                    access_log=access_log, session_ttl_s=session_ttl_s)


def _serve_held(model: str, host: str, port: int, key: str, generated: bool, state_dir: str, *, dtype: str,
                lora_alpha: float, limits: dict[str, int] | None, access_log: bool, session_ttl_s: float) -> None:
    from memrl.tinker.app import create_app

    sock = bind_socket(host, port)
    try:
        svc = build_service(model, state_dir, dtype=dtype, lora_alpha=lora_alpha, limits=limits,
                            session_ttl_s=session_ttl_s)
        app = create_app(svc, key, access_log=access_log)
        url = url_of(sock)
        lines = [f"memrl tinker: serving {svc.base_name} on {url} (checkpoints in {Path(state_dir).resolve()})",
                 f"  in your script: ServiceClient(base_url={url!r}); base_model={svc.base_name!r}"]
        if generated:
            lines.append(f"  API key (generated, shown once): export TINKER_API_KEY={key}")
        else:
            lines.append("  API key: the one given (--api-key or $MEMRL_TINKER_API_KEY); set TINKER_API_KEY to it")
        config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=3)
        if _Server(config, app, "\n".join(lines)).run_until_stopped(sock):
            print("memrl tinker: stopped", file=sys.stderr, flush=True)
            raise SystemExit(130)  # Ctrl-C's exit status
    finally:
        sock.close()
