"""``memrl tinker``: a local server for the Tinker API, so scripts written for Tinker train here."""

from __future__ import annotations

import math
from typing import Optional

import typer

from memrl.cli.errors import user_errors


@user_errors
def tinker_cmd(
    model: str = typer.Option(..., "--model", "-m", help="Base model: folder, hub id or alias (tiny, "
                              "smollm2-135m-instruct). Scripts name it as base_model (the alias, or the path "
                              "the server prints)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Bind address (loopback by default)."),
    port: int = typer.Option(8000, "--port", help="TCP port (1..65535)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="The key clients must send (TINKER_API_KEY; "
                                          "starts with 'tml-'). Default: $MEMRL_TINKER_API_KEY, else a new one "
                                          "printed once."),
    state_dir: str = typer.Option("runs/tinker", "--state-dir", help="Folder for checkpoints "
                                  "(tinker://<run>/weights/<name> lives in <state-dir>/runs/<run>/weights/<name>, "
                                  "each : of the run id a _ in the folder name)."),
    engine: str = typer.Option("hf", "--engine", help="hf (in-process transformers; the only engine served)."),
    dtype: str = typer.Option("auto", "--dtype", help="auto | float32 | bfloat16 | float16."),
    lora_alpha: float = typer.Option(32.0, "--lora-alpha", help="LoRA scale numerator (scale = alpha / rank)."),
    max_loras: int = typer.Option(16, "--max-loras", help="Live LoRA training clients at once."),
    max_datums: int = typer.Option(1024, "--max-datums", help="Datums per forward_backward request (the SDK "
                                   "splits bigger batches)."),
    max_num_samples: int = typer.Option(64, "--max-num-samples", help="Largest num_samples of one sample call."),
    micro_tokens: int = typer.Option(2048, "--micro-tokens", help="Padded tokens per forward pass (the memory "
                                     "bound: their activations are kept for the backward pass)."),
    max_body_mb: float = typer.Option(64.0, "--max-body-mb", help="Largest request body, in MB (413 beyond)."),
    session_ttl_s: float = typer.Option(120.0, "--session-ttl-s", help="Seconds without a heartbeat (the SDK "
                                        "sends one every 10 s) before a script's session ends and its LoRA clients "
                                        "free their --max-loras slots (a script that never closes its "
                                        "ServiceClient ends this way). Its checkpoints stay."),
    access_log: bool = typer.Option(False, "--access-log", help="One stderr line per request, and one per finished "
                                    "operation: ms queued, running, and until the client fetched it."),
) -> None:
    """Serve the Tinker API (the `tinker` SDK's ServiceClient) for one base model, with LoRA training.

    Point a Tinker script at it with ServiceClient(base_url="http://127.0.0.1:8000") and
    TINKER_API_KEY set to the server's key. Several LoRA training clients share the base model, each
    with its own adapter and AdamW state; forward_backward takes cross_entropy, importance_sampling,
    ppo, cispo and dro; sampling clients sample from saved weights with memrl's log-probs. Checkpoints are
    safetensors + JSON under --state-dir and survive a restart. Ctrl-C stops gracefully.
    """
    from memrl.tinker.server import serve

    for flag, value in (("--max-loras", max_loras), ("--max-datums", max_datums),
                        ("--max-num-samples", max_num_samples), ("--micro-tokens", micro_tokens)):
        if value < 1:
            raise ValueError(f"{flag} {value}: must be >= 1")
    if not (math.isfinite(max_body_mb) and max_body_mb > 0):
        raise ValueError(f"--max-body-mb {max_body_mb}: must be a positive finite number")
    if not (math.isfinite(lora_alpha) and lora_alpha > 0):
        raise ValueError(f"--lora-alpha {lora_alpha}: must be a positive finite number")
    if not (math.isfinite(session_ttl_s) and session_ttl_s >= 30):
        raise ValueError(f"--session-ttl-s {session_ttl_s}: must be at least 30 (the SDK's heartbeats are 10 s apart)")
    from memrl.models.resolve import quiet_hub_progress

    quiet_hub_progress()  # transformers' "Loading weights" bar is carriage-return noise in a server's log
    limits = {"max_loras": max_loras, "max_datums": max_datums, "max_num_samples": max_num_samples,
              "micro_tokens": micro_tokens, "max_body_bytes": int(max_body_mb * 2**20)}
    serve(model, host=host, port=port, api_key=api_key, state_dir=state_dir, engine=engine, dtype=dtype,
          lora_alpha=lora_alpha, limits=limits, access_log=access_log, session_ttl_s=session_ttl_s)
