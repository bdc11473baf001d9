"""``memrl data prompts``: the papers' evaluation-client prompts from the user's checkout, as a prompts file."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
import yaml
from rich.console import Console

from memrl.cli.errors import user_errors
from memrl.io.atomic import atomic_write

_HELP = {
    "client": "memagent (MemAgent's client for RL-MemAgent: 'Therefore, the answer is'), memagent-boxed "
              "(its \\boxed{} client) or rememr1 (ReMemR1's client).",
    "memagent_repo": "Clients memagent*: a checkout of github.com/BytedTsinghua-SIA/MemAgent "
                     "(default: $MEMRL_MEMAGENT_REPO).",
    "rememr1_repo": "Client rememr1: a checkout of github.com/syr-cn/ReMemR1 (default: $MEMRL_REMEMR1_REPO).",
}


def prompts(
    client: str = typer.Argument(..., help=_HELP["client"]),
    out: Path = typer.Option(..., "--out", "-o", help="The prompts file to write (YAML)."),
    memagent_repo: Optional[Path] = typer.Option(None, "--memagent-repo", help=_HELP["memagent_repo"]),
    rememr1_repo: Optional[Path] = typer.Option(None, "--rememr1-repo", help=_HELP["rememr1_repo"]),
    force: bool = typer.Option(False, "--force", help="Replace an existing --out file."),
) -> None:
    """Write the prompts a paper's evaluation client sends, read from your checkout of its repository.

    memrl eval --protocol memagent|rememr1 samples, reads and scores as the client does; with this file as
    workflow.options.prompts it also sends the client's words (the ids a server builds from them, under
    workflow.options.slot_fill=text). The text stays the authors': it is read from the checkout, never shipped.
    """
    from memrl.data.original_prompts import client_prompts

    if out.is_dir():
        raise ValueError(f"--out {out} is a folder; name the YAML file to write")
    if out.exists() and not force:
        raise ValueError(f"--out {out} exists; pass --force to replace it")
    found, source, texts = client_prompts(client, {"memagent": memagent_repo, "rememr1": rememr1_repo})
    options = " ".join(f"workflow.options.{o}" for o in (f"prompts={out}", f"answer_format={found.answer_format}",
                                                          *found.options))
    header = (f"# {found.about}: its prompts, read from {source}\n"
              f"# ({found.original.name} {found.original.url}, pinned commit {found.original.commit[:7]}).\n"
              f"# Use: workflow.name={found.workflow} {options}\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(out) as fh:
        fh.write(header + yaml.safe_dump(texts, allow_unicode=True, sort_keys=False, width=10_000))
    Console(stderr=True).print(
        f"wrote {out}: {', '.join(texts)} from {source}\nevaluate with: memrl eval ... --workflow {found.workflow} "
        f"--protocol {found.original.name.lower()} {options}", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add ``prompts`` to the ``memrl data`` command group."""
    app.command("prompts")(user_errors(prompts))
