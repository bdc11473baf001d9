"""The settings an eval protocol implies, filled in where the user did not choose them.

``sampling.temperature`` defaults to 1.0 for training rollouts; an eval that nobody configured is
greedy instead (``memrl`` protocol). The published protocols (``memagent`` / ``rememr1``) run as the
papers' evaluation clients did: temperature 0.7, top_p 0.95, the whole context read (their clients
set no truncation, so a training budget such as ``max_chunks: 8`` does not apply, nor a cut of the
question), and, for ReMemR1's released variant, recall searching the memories including the current turn's (its eval code; its
training code searches the earlier ones only). The workflows also fill their prompts as the clients do
(``workflow.slot_fill=text``).

What counts as chosen: under ``memrl``, any value set (YAML file, flag or override); under a
published protocol, a flag or override on the command line (``explicit``): a paper config's YAML
holds its *training* settings, which the paper's eval did not use. ``recorded``: the settings an
existing results folder was run with; they come first, so re-scoring a folder under another protocol
re-uses its episodes (the protocol's defaults apply to new folders).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from memrl.config.schema import MemRLConfig

# The originals' eval scripts sample every question at temperature 0.7, top_p 0.95.
PUBLISHED_SAMPLING = {"temperature": 0.7, "top_p": 0.95}
PUBLISHED = ("memagent", "rememr1")
PROTOCOL_KEYS = ("max_chunks", "question_tokens", "slot_fill", "recall_pool")  # what a published protocol may set


def with_eval_sampling(cfg: MemRLConfig, recorded: dict[str, Any] | None = None,
                       explicit: Collection[str] | None = None) -> MemRLConfig:
    """``cfg`` with the protocol's eval settings where nothing was chosen (see the module docstring).

    ``explicit``: the dotted keys given on the command line; None treats every set value as chosen.
    """
    published = cfg.eval.protocol in PUBLISHED
    chosen = cfg.sampling.model_fields_set if explicit is None or not published else \
        {k.split(".", 1)[1] for k in explicit if k.startswith("sampling.")}
    was = (recorded or {}).get("sampling") or {}
    update: dict[str, float] = {}
    if "temperature" not in chosen:
        update["temperature"] = was.get("temperature", PUBLISHED_SAMPLING["temperature"] if published else 0.0)
    if "top_p" not in chosen and ("top_p" in was or published):
        update["top_p"] = was.get("top_p", PUBLISHED_SAMPLING["top_p"])
    cfg = _published_workflow(cfg, recorded, explicit)
    if not update:
        return cfg
    return cfg.model_copy(update={"sampling": cfg.sampling.model_copy(update=update)})


def _published_workflow(cfg: MemRLConfig, recorded: dict[str, Any] | None,
                        explicit: Collection[str] | None) -> MemRLConfig:
    """The workflow options the protocol sets: kept where chosen, else the recorded run's, else the protocol's."""
    wf = cfg.workflow
    fields = type(wf.opts).model_fields
    was_wf = (recorded or {}).get("workflow") or {}
    was = {**was_wf, **(was_wf.get("options") or {})} if was_wf.get("name") == wf.name else {}
    options = dict(wf.options)
    wanted = _protocol_options(cfg)
    given = explicit if cfg.eval.protocol in PUBLISHED else None  # under memrl a YAML value is a choice too
    for key in PROTOCOL_KEYS:  # a folder run under one protocol is re-scored under another with its own options
        if key in fields and not _chosen(key, wf.options, given) and (key in was or key in wanted):
            options[key] = was.get(key, wanted.get(key))
    if options == wf.options:
        return cfg
    return cfg.model_copy(update={"workflow": type(wf)(name=wf.name, options=options)})


def _chosen(key: str, options: dict[str, Any], explicit: Collection[str] | None) -> bool:
    """Whether the user chose workflow option ``key``: on the command line, or anywhere when ``explicit`` is None.

    ``slot_fill`` set in a YAML file counts too: how prompts are filled is the model's, not a training budget."""
    if explicit is None or key == "slot_fill":
        return key in options
    return f"workflow.options.{key}" in explicit or f"workflow.{key}" in explicit


def _protocol_options(cfg: MemRLConfig) -> dict[str, Any]:
    """The workflow options of the protocol's evaluation client."""
    protocol = cfg.eval.protocol
    if protocol not in PUBLISHED:
        return {}
    out: dict[str, Any] = {"max_chunks": None, "question_tokens": None}  # the clients read every chunk, whole questions
    out["slot_fill"] = "text"  # both clients send text messages: the server tokenizes each prompt whole
    if protocol == "rememr1" and cfg.workflow.options.get("rememr1_variant") == "released":
        out["recall_pool"] = "including_current"
    return out


def own_prompts_note(cfg: MemRLConfig) -> str | None:
    """A note when a published protocol runs with memrl's own prompt wording: its numbers then measure the
    model on prompts the paper's client never sent (the client's text is the authors', read from a checkout)."""
    protocol = cfg.eval.protocol
    if protocol not in PUBLISHED or "prompts" not in type(cfg.workflow.opts).model_fields \
            or cfg.workflow.options.get("prompts"):
        return None
    return (f"note: --protocol {protocol} with memrl's own wording of the prompts (workflow.options.prompts is "
            f"unset); for the client's: memrl data prompts {protocol} --{protocol}-repo CHECKOUT --out PROMPTS.yaml, then "
            f"workflow.options.prompts=PROMPTS.yaml")


def variant_note(cfg: MemRLConfig) -> str | None:
    """A note when ``--protocol rememr1`` runs memrl's own ReMemR1 variant: its recall is not the client's."""
    if cfg.eval.protocol != "rememr1" or getattr(cfg.workflow.opts, "rememr1_variant", "released") == "released":
        return None
    return ("note: --protocol rememr1 scores as ReMemR1's script, but the episodes run memrl's ReMemR1 variant "
            "(its recall differs from the client's); ReMemR1's client: workflow.options.rememr1_variant=released")


def client_sampling_note(cfg: MemRLConfig, recorded: dict[str, Any] | None) -> str | None:
    """A note when a published protocol re-scores episodes an earlier run sampled otherwise than the paper's
    client (a folder first run under memrl: greedy, ids spliced): the scoring is the paper's, the episodes not."""
    protocol, s = cfg.eval.protocol, cfg.sampling
    fill = cfg.workflow.options.get("slot_fill")
    if protocol not in PUBLISHED or not recorded or (
            (s.temperature, s.top_p) == tuple(PUBLISHED_SAMPLING.values()) and fill in (None, "text")):
        return None
    fill_text = f", slot_fill={fill}" if fill else ""
    return (f"note: the folder's episodes were sampled at temperature {s.temperature:g}, top_p {s.top_p:g}"
            f"{fill_text}; --protocol {protocol} re-scores them as the paper's script scores, but its client samples "
            f"at temperature {PUBLISHED_SAMPLING['temperature']:g}, top_p {PUBLISHED_SAMPLING['top_p']:g} with "
            f"slot_fill=text (a new --out runs so)")
