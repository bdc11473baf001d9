"""``memrl serve``: an OpenAI-compatible server for a local model."""

from __future__ import annotations

from typing import Optional

import typer

from memrl.cli.errors import user_errors


@user_errors
def serve_cmd(
    model: str = typer.Option(..., "--model", "-m", help="Model folder, hub id or alias (tiny, smollm2-135m-instruct)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Bind address (loopback by default)."),
    port: int = typer.Option(8000, "--port", help="TCP port (1..65535)."),
    dtype: str = typer.Option("auto", "--dtype", help="auto | float32 | bfloat16 | float16."),
    served_name: Optional[str] = typer.Option(None, "--served-model-name", help="Name in /v1/models "
                                                "(default: a local folder's own name, which its path also answers to, as "
                                                "MemAgent's and ReMemR1's scripts expect; else --model as given)."),
    api_key_env: Optional[str] = typer.Option(None, "--api-key-env", help="Require 'Bearer $VAR' on /v1/*."),
    max_batch_size: int = typer.Option(32, "--max-batch-size", help="Requests decoded together."),
    max_n: int = typer.Option(16, "--max-n", help="Largest n (completions per prompt) a request may ask for."),
    max_body_mb: float = typer.Option(8.0, "--max-body-mb", help="Largest request body, in MB (413 beyond)."),
    engine: str = typer.Option("hf", "--engine", "-e", help="Engine kind (engine.kind): hf (batching "
                               "transformers), vllm (in-process vLLM: continuous batching) or a registered one."),
    max_model_len: Optional[int] = typer.Option(
        None, "--max-model-len", help="Cap on prompt + max_tokens (default: the model's max_position_embeddings)."),
) -> None:
    """Serve a model through /v1/completions, /v1/chat/completions and /v1/models (token ids + logprobs).

    Requests beyond the limits get HTTP 400 with an OpenAI-style error; /health is public.
    """
    from memrl.models.resolve import quiet_hub_progress
    from memrl.serve.server import serve

    quiet_hub_progress()  # transformers' "Loading weights" bar is carriage-return noise in a server's log
    serve(model, host=host, port=port, dtype=dtype, served_name=served_name, api_key_env=api_key_env,
          max_batch_size=max_batch_size, max_n=max_n, max_body_mb=max_body_mb, max_model_len=max_model_len,
          engine=engine)
