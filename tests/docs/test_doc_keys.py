"""Every config key the docs and the README name exists (a renamed or removed key fails here, not for a reader)."""

from __future__ import annotations

import re

from tests.docs.blocks import DOCS, REPO
from tests.docs.test_reference_fresh import load_generator

SECTIONS = "model|data|workflow|env|sampling|eval|engine|algorithm|lora|trainer|cluster"
KEY = re.compile(rf"(?<![\w./-])((?:{SECTIONS})\.[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*)")
FREE_FORM = ("env.tool_options.", "engine.vllm.args.")  # dictionaries the domain / vLLM check themselves
# Named on purpose: a method, the typo in the error example, the pre-options spelling the notice maps,
# and the option of the example plug-in workflow examples/custom_workflow/recall.py (not a built-in).
NOT_KEYS = {"env.step", "trainer.lrr", "workflow.chunk_tokens", "workflow.options.note_tokens"}
GENERATED_OR_HISTORY = {"reference/config.md", "reference/cli.md", "CHANGELOG.md", "guides/async.md"}


def named_keys() -> dict[str, list[str]]:
    """Dotted config keys in the hand-written pages and the README, with where they appear."""
    pages = [p for p in sorted(DOCS.rglob("*.md")) if str(p.relative_to(DOCS)) not in GENERATED_OR_HISTORY]
    found: dict[str, list[str]] = {}
    for page in pages + [REPO / "README.md"]:
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for key in KEY.findall(line):
                if not key.endswith((".py", ".md", ".yaml", ".json", ".jsonl", ".html")):
                    found.setdefault(key, []).append(f"{page.relative_to(REPO)}:{n}")
    return found


def test_every_named_config_key_exists() -> None:
    valid = load_generator().config_keys()
    found = named_keys()
    assert len(found) > 50, f"expected the docs to name many config keys, found {len(found)}"
    unknown = {k: where[:3] for k, where in found.items()
               if k not in valid and k not in NOT_KEYS and not k.startswith(FREE_FORM)}
    assert not unknown, f"the docs name config keys the schema does not have: {unknown}"
