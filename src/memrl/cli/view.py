"""``memrl view DIR``: browse a training run's rollouts and curves, or an eval folder's episodes."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from memrl.cli.common import counted
from memrl.cli.errors import user_errors


@user_errors
def view_cmd(
    path: Path = typer.Argument(..., help="A training run (metrics.jsonl, rollouts/) or an eval --out folder."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write one self-contained HTML file instead of serving."),
    port: int = typer.Option(0, "--port", help="Port on 127.0.0.1, 0-65535 (0, the default: a free one)."),
    tokenizer: Optional[str] = typer.Option(
        None, "--tokenizer", help="Tokenizer for per-token views (default: the run's model.tokenizer or model.path, "
        "shown as text if it does not load; one given here must load)."),
    steps: Optional[str] = typer.Option(None, "--steps", help="A run's rollout steps to show: 5, 10-20, 100- or a "
                                        "comma list (default: all)."),
    last: Optional[int] = typer.Option(None, "--last", help="Only the last N saved rollout steps of a run."),
    force: bool = typer.Option(False, "--force", help="With --out: replace a file memrl did not write (a page "
                               "memrl view wrote is replaced without it)."),
) -> None:
    """Episodes (conversations, generated tokens, log-probs, rewards, tool calls) and training curves in a browser."""
    from memrl.io.atomic import atomic_write
    from memrl.view.loader import load_payload, require_tokenizer
    from memrl.view.page import render_page
    from memrl.view.server import make_server, serve

    if out is not None and out.suffix.lower() not in (".html", ".htm"):  # never over its input (metrics.jsonl)
        raise ValueError(f"--out {out}: the page is one HTML file; name a .html file")
    if out is not None:
        from memrl.io.own_files import check_replace

        check_replace(out, force)
    if tokenizer is not None:  # asked for by name: failing to load it is an error (the run's own only warns)
        require_tokenizer(tokenizer)
    if out is None:
        server = make_server(path, port, tokenizer, steps=steps, last=last)  # a taken port fails before the load
        try:
            # fail here, clearly, not in the browser; lazily, as every page the server builds (a full decode of a
            # 20,000-episode run took 40 s before the URL showed)
            first = load_payload(path, tokenizer, steps=steps, last=last, lazy=True)
            if steps and not first["episodes"]:
                _no_such_steps(path, steps)
        except BaseException:
            server.server_close()
            raise
        if not first["episodes"]:
            _no_episodes(path)
        serve(server, announce=lambda url: typer.echo(f"memrl view: {url}  (refresh for new steps; Ctrl-C stops)"))
        return
    payload = load_payload(path, tokenizer, steps=steps, last=last)
    if steps and not payload["episodes"]:
        _no_such_steps(path, steps)
    page = render_page(payload)
    with atomic_write(out) as fh:
        fh.write(page)
    size = len(page.encode("utf-8")) / 1e6
    typer.echo(f"wrote {out} ({counted(len(payload['episodes']), 'episode')}, {size:.1f} MB)")
    if size > 50:
        typer.echo("the page is large: pick steps with --steps A-B or --last N", err=True)
    if not payload["episodes"]:
        _no_episodes(path)


def _no_episodes(path: Path) -> None:
    """A page of no episode: where a run's failed episodes went, if it has any (the page shows only rollouts)."""
    # a run's failures/ holds a file per episode; a tool eval's, a folder per task of a file per trial
    failures = [f for f in (path / "failures").rglob("*") if f.is_file()] if path.is_dir() else []
    if failures:
        typer.echo(f"no saved episode to show; {counted(len(failures), 'failed episode')} left a traceback in "
                   f"{path / 'failures'}", err=True)


def _no_such_steps(path: Path, steps: str) -> None:
    """A page with none of the episodes asked for is a mistake in --steps: say which steps the run saved."""
    from memrl.view.loader import rollout_files

    saved = rollout_files(path)[1] if path.is_dir() else []
    if saved:
        shown = ", ".join(map(str, saved[:10])) + (f", ... {saved[-1]}" if len(saved) > 10 else "")
        raise ValueError(f"--steps {steps}: no saved rollout step matches; {path} has steps {shown}")
