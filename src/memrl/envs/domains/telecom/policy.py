"""The agent's system prompt for τ²-bench's telecom domain, assembled as τ²-bench assembles it."""

from __future__ import annotations

from pathlib import Path

from memrl.io.text_files import read_text


def compose_policy(folder: str | Path, solo: bool = False, workflow: bool = False) -> str:
    """The agent's policy: the main policy and the tech-support guide, each in its own tag.

    Solo mode uses ``main_policy_solo.md``; ``workflow`` picks the step-by-step
    guide (``tech_support_workflow*.md``) instead of the manual. τ²-bench uses
    the same manual in both modes; the workflow has a solo variant.
    """
    folder = Path(folder)
    main = folder / ("main_policy_solo.md" if solo else "main_policy.md")
    if workflow:
        guide = folder / ("tech_support_workflow_solo.md" if solo else "tech_support_workflow.md")
    else:
        guide = folder / "tech_support_manual.md"
    for path in (main, guide):
        if not path.is_file():
            raise FileNotFoundError(f"telecom policy file missing: {path}")
    return (f"<main_policy>\n{read_text(main)}\n</main_policy>\n"
            f"<tech_support_policy>\n{read_text(guide)}\n</tech_support_policy>")
