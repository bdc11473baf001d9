"""memrl's ``shell`` tool beside τ³'s own (``SandboxManager`` + ``ShellMixin.shell``), both through srt.

Both export the same knowledge base into a sandbox of their own; the script compares the exported
files (names and bytes), then runs a list of commands (listing, reading, searching, counting, ``ls -l``
owners and dates, escapes, writes, a failing command) through each and compares the tool's answers.

    pip install loguru pandas toml addict deepdiff python-dotenv litellm   # what importing τ³'s modules needs
    npm install -g @anthropic-ai/sandbox-runtime@0.0.23                    # + ripgrep, bubblewrap, socat
    PYTHONPATH=~/tau2-bench/src python bench/tau3_shell_parity.py --data ../shared/tau2
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

COMMANDS = ["ls | head -5", "ls | wc -l", "head -12 INDEX.md", "cat doc_credit_cards_silver_rewards_card_001.md",
            "grep -l 'cash back' *.md | head", "grep -c 'dispute' doc_bank_accounts_bank_accounts__general__037.md",
            "grep -l 'no such phrase anywhere' *.md", "grep -rn 'Regulation E' . | head -3", "ls -la | head -4",
            "find . -name '*savings*' | sort | head", "wc -w INDEX.md", "cat ../srt-settings.json", "cat /etc/hosts",
            "ls ~", "echo $HOME", "echo note > note.md", "cat missing.md", "true", "awk 'NR==1' INDEX.md"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="a folder holding banking_knowledge/documents")
    args = ap.parse_args()
    from tau2.domains.banking_knowledge.retrieval_mixins import ShellMixin
    from tau2.knowledge.sandbox_manager import SandboxManager

    from memrl.envs.domains.banking_knowledge.retrieval import load_documents
    from memrl.envs.domains.banking_knowledge.sandbox import Sandbox, shell_text

    docs = load_documents(args.data / "banking_knowledge" / "documents")
    theirs = SandboxManager(allow_writes=False)
    theirs.export_documents([{"id": d.id, "title": d.title, "content": d.content} for d in docs], file_format="md")
    ours = Sandbox(docs)
    try:
        files = sorted(p.name for p in theirs.kb_dir.iterdir())
        same_files = files == sorted(p.name for p in ours.kb_dir.iterdir()) and all(
            (theirs.kb_dir / n).read_bytes() == (ours.kb_dir / n).read_bytes() for n in files)
        print(f"exported files: {len(files)}, names and bytes equal: {same_files}")
        tool = SimpleNamespace(_sandbox=theirs)
        equal = 0
        for command in COMMANDS:
            tau3 = ShellMixin.shell(tool, command)
            memrl = shell_text(ours, command)
            equal += tau3 == memrl
            print(f"{command[:48]:48s}  equal {tau3 == memrl}  {tau3.splitlines()[0][:60] if tau3 else ''!r}")
        print(f"{equal}/{len(COMMANDS)} commands answer the same; exported files equal: {same_files}")
    finally:
        theirs.cleanup()
        ours.close()


if __name__ == "__main__":
    main()
