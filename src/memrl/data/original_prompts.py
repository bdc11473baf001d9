"""The papers' evaluation-client prompts, read from a checkout the user points at, as a memrl prompts file.

``--protocol memagent|rememr1`` samples, reads and scores as the papers' evaluation clients do, but the
prompt *wording* is the authors' text and stays in their repositories: without it a published checkpoint
(RL-MemAgent-7B, say) is evaluated with prompts it never saw. This module reads the clients' templates
(parsed as text with :mod:`ast`, never imported) and turns their ``str.format`` templates into memrl's
slot templates (``{prompt}`` -> ``{question}``, ``{recalled_memory}`` -> ``{recalled}``, ``{{``/``}}``
unescaped, since memrl takes every other brace literally), so that ``workflow.options.prompts`` can name
the result.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

from memrl.data.originals import MEMAGENT, REMEMR1, Original, OriginalMissing, checkout, read_string_constant

# the clients' format fields -> memrl's template slots
SLOTS = {"prompt": "question", "memory": "memory", "chunk": "chunk", "recalled_memory": "recalled"}


@dataclass(frozen=True)
class Client:
    """One evaluation client: which file of which repository, its constants per memrl prompt, its answer format."""

    original: Original
    path: str
    constants: dict[str, str]  # memrl prompt name -> the client's constant
    answer_format: str
    workflow: str
    about: str
    options: tuple[str, ...] = ()  # the workflow options the client's behaviour needs beside its prompts


_MEMAGENT_NAMES = {"memory": "TEMPLATE", "final": "TEMPLATE_FINAL", "no_memory": "NO_MEMORY"}
CLIENTS = {
    "memagent": Client(MEMAGENT, "taskutils/memory_eval/utils/recurrent.py", _MEMAGENT_NAMES, "answer_is",
                       "memagent", "MemAgent's client as its run.py evaluates RL-MemAgent (--api recurrent)"),
    "memagent-boxed": Client(MEMAGENT, "taskutils/memory_eval/utils/recurrent_boxed.py", _MEMAGENT_NAMES, "boxed",
                             "memagent", "MemAgent's boxed-answer client (recurrent_boxed)"),
    "rememr1": Client(REMEMR1, "taskutils/memory_eval/utils/rememr1.py",
                      {"memory": "TEMPLATE", "final": "TEMPLATE_FINAL_BOXED", "no_memory": "NO_MEMORY",
                       "no_recall": "NO_RECALLED_MEMORY"}, "boxed", "rememr1",
                      "ReMemR1's client as its run_eval.py evaluates it (method rememr1)",
                      ("rememr1_variant=released",)),  # its recall over distinct memories, the current one too
}


def as_slot_template(text: str, where: str) -> str:
    """A ``str.format`` template as memrl's slot template; a field memrl has no slot for is refused."""
    pieces = []
    for literal, field, spec, conversion in string.Formatter().parse(text):
        pieces.append(literal)
        if field is None:
            continue
        if field not in SLOTS or spec or conversion:
            raise OriginalMissing(f"{where}: the template has a field {{{field}}} memrl has no slot for "
                                  f"(known: {', '.join(sorted(SLOTS))}); is this the pinned commit?")
        pieces.append("{" + SLOTS[field] + "}")
    return "".join(pieces)


def client_prompts(name: str, repos: dict[str, str | Path | None]) -> tuple[Client, Path, dict[str, str]]:
    """(the client, the file read, memrl prompt name -> template) for client ``name`` in the user's checkout
    (``repos``: a checkout per workflow, memagent / rememr1; None falls back to the environment variable)."""
    if name not in CLIENTS:
        raise ValueError(f"unknown client {name!r}; expected one of {', '.join(CLIENTS)}")
    client = CLIENTS[name]
    root = checkout(client.original, repos.get(client.workflow))
    prompts = {}
    for key, constant in client.constants.items():
        text = read_string_constant(client.original, root, client.path, constant)
        prompts[key] = as_slot_template(text, f"{root / client.path}:{constant}") if key in ("memory", "final") \
            else text  # plain strings, never formatted by the client
    return client, root / client.path, prompts
