"""Every config key the docs and the README name exists (a renamed or removed key fails here, not for a reader)."""

from __future__ import annotations

import re

from tests.docs.blocks import DOCS, REPO
from tests.docs.test_reference_fresh import load_generator

SECTIONS = "model|data|workflow|env|sampling|eval|engine|algorithm|teacher|lora|trainer|cluster"
KEY = re.compile(rf"(?<![\w./-])((?:{SECTIONS})\.[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*)")
FREE_FORM = ("env.tool_options.", "engine.vllm.args.", "algorithm.policy_loss_options.",
             "algorithm.adv_estimator_options.")  # dictionaries the domain / vLLM / plug-in check themselves
# Named on purpose: a method, the typos in the error examples, the pre-options spelling the notice maps,
# the option of the example plug-in workflow examples/custom_workflow/recall.py (not a built-in), and
# verl-agent's and the memory-agent verl forks' own settings that the docs map to memrl's.
NOT_KEYS = {"env.step", "trainer.lrr", "workflow.options.chunk_tokns", "workflow.chunk_tokens",
            "workflow.options.note_tokens", "algorithm.gigpo.step_advantage_w", "algorithm.gigpo.mode",
            "algorithm.gigpo.enable_similarity", "env.rollout.n",
            "algorithm.grpo_use_adv", "algorithm.alpha",  # MemAgent's / ReMemR1's verl forks' flags
            "data.gen_batch_size",  # verl's DAPO recipe
            "algorithm.epsilon_high",  # TRL's name, which the config answers with memrl's
            "trainer.learning_rate", "model.name"}  # other libraries' names the configuration guide maps to memrl's
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


def cli_options() -> dict[str, set[str]]:
    """Each ``memrl`` command path (``memrl data synth``) and the option names it accepts."""
    import typer

    from memrl.cli.main import app

    out: dict[str, set[str]] = {}

    def walk(path: str, cmd) -> None:
        out[path] = {o for p in cmd.params for o in list(getattr(p, "opts", [])) + list(getattr(p, "secondary_opts", []))
                     if o.startswith("-")} | {"--help"}
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(f"{path} {name}", sub)

    walk("memrl", typer.main.get_command(app))
    return out


def memrl_commands(text: str) -> list[list[str]]:
    """The ``memrl ...`` command lines of a shell block (continuations joined, env prefixes and comments dropped)."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        words = re.split(r"\s(?:\||&&|;|>)\s", line.split("#", 1)[0])[0].split()  # up to a pipe or redirect
        while words and re.match(r"^[A-Z_]+=", words[0]):
            words = words[1:]
        if words and words[0] == "memrl":
            out.append(words)
    return out


def test_every_documented_memrl_option_exists() -> None:
    """``memrl eval --protcol x`` in a guide fails here: each option a documented command uses is accepted."""
    from tests.docs.blocks import SHELLS, blocks

    options = cli_options()
    pages = [p for p in sorted(DOCS.rglob("*.md")) if str(p.relative_to(DOCS)) not in GENERATED_OR_HISTORY]
    checked, bad = 0, []
    for page in pages + [REPO / "README.md"]:
        for block in blocks(page):
            if block.lang not in SHELLS:
                continue
            for words in memrl_commands(block.code):
                path = "memrl"
                for w in words[1:]:
                    if f"{path} {w}" in options:
                        path = f"{path} {w}"
                    else:
                        break
                for w in words[1:]:
                    name = w.split("=", 1)[0]
                    if name.startswith("-") and name not in options[path]:
                        bad.append(f"docs/{block.page}:{block.line}: {path} {name}")
                checked += 1
    assert checked > 40, f"expected many documented memrl commands, found {checked}"
    assert not bad, f"documented options the CLI does not accept: {bad}"
