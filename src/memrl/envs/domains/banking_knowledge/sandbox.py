"""τ³'s ``shell`` tool (``terminal_use[_write]``, ``alltools``): commands over the knowledge base, in a sandbox.

As τ³ (``tau2.knowledge.sandbox_manager``), each environment gets a folder of its own with every document
exported as ``<id>.md`` (``# title``, a blank line, the content) and an ``INDEX.md`` listing them, and each
command runs there through Anthropic's sandbox-runtime (``srt``): no network, writes only inside the
folder and only for ``terminal_use_write``, a few sensitive paths unreadable. Before that, a command
holding an obvious way out (``..``, ``~``, ``$HOME``, an absolute path outside quotes) is refused, and
the output is cleaned of the real user name and of ``ls -l`` owners and dates. τ³ calls this
best-effort isolation (srt can only deny reads, not confine them); memrl runs agent commands only
through srt and refuses to start without it.

Needs ``srt`` 0.0.23 (``npm install -g @anthropic-ai/sandbox-runtime@0.0.23``, the version τ³ pins) and,
on Linux, ``rg``, ``bwrap`` and ``socat``; on macOS ``rg``.
"""

from __future__ import annotations

import getpass
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from memrl.envs.domains.banking_knowledge.capped_run import capped_run
from memrl.envs.domains.banking_knowledge.retrieval import Document

TIMEOUT_S = 30
REQUIRED = {"linux": ("srt", "rg", "bwrap", "socat"), "darwin": ("srt", "rg")}
INSTALL = {"linux": "npm install -g @anthropic-ai/sandbox-runtime@0.0.23 and apt install ripgrep bubblewrap socat",
           "darwin": "npm install -g @anthropic-ai/sandbox-runtime@0.0.23 and brew install ripgrep"}
# what τ³ shows in place of the real owner and date of a listed file
SHOWN_USER, SHOWN_GROUP, SHOWN_DATE = "kb_user", "kb_group", "Jan  1 00:00"
_LS_LINE = re.compile(r"^([d\-lrwxst@]+\s+\d+\s+)(\S+)\s+(\S+)\s+(\d+)\s+(\w{3}\s+\d+\s+[\d:]+)\s+(.*)$", re.MULTILINE)


class SandboxError(ValueError):
    """The host cannot sandbox commands (a missing binary, srt failing): the user's set-up to fix (printed as one
    line by the CLI, as other configuration errors), never the agent's doing."""


def check_sandbox() -> None:
    """Refuse, in one line naming what to install, a host without srt and the tools it runs on."""
    platform = "linux" if sys.platform.startswith("linux") else sys.platform
    if platform not in REQUIRED:
        raise SandboxError(f"the shell retrieval variants need sandbox-runtime, which runs on Linux and macOS, "
                           f"not {sys.platform}")
    missing = [name for name in REQUIRED[platform] if shutil.which(name) is None]
    if missing:
        raise SandboxError(f"the shell retrieval variants run commands through sandbox-runtime; missing: "
                           f"{', '.join(missing)} (install: {INSTALL[platform]})")


def escape(command: str) -> str | None:
    """τ³'s check for an obvious way out of the folder (quoted text aside), or None."""
    bare = re.sub(r'"[^"]*"', '""', re.sub(r"'[^']*'", '""', command))
    if ".." in bare:
        return ".."
    if re.search(r"(?:^|[\s;|&])(/[a-zA-Z])", bare):
        path = re.search(r"(?:^|[\s;|&])(/[a-zA-Z][^\s;|&]*)", bare)
        if path:
            return f"absolute path: {path.group(1)}"
    if bare.strip().startswith("/"):
        return "absolute path at start"
    if "~" in bare:
        return "~"
    if "$HOME" in bare or "${HOME}" in bare:
        return "$HOME"
    return None


def sanitize(output: str) -> str:
    """The output without the host's identity: ``ls -l`` owners and dates, and ``/home/<user>`` paths."""
    if not output:
        return output
    output = _LS_LINE.sub(lambda m: f"{m.group(1)}{SHOWN_USER}  {SHOWN_GROUP}  {m.group(4)} {SHOWN_DATE} {m.group(6)}",
                          output)
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name (a container without one): nothing to hide
        return output
    return re.sub(rf"/(?:Users|home)/{re.escape(user)}(?=/|$)", "/home/kb_user", output)


def file_stem(doc_id: str) -> str:
    """A document id as a file name, as τ³ makes it."""
    safe = doc_id.replace("/", "_").replace("\\", "_").replace("..", "_")
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in safe)[:255]


class Sandbox:
    """One environment's folder of documents and the srt settings its commands run under.

    The folder is a temporary directory memrl created; it is removed when the sandbox is closed or
    garbage-collected (never anything else)."""

    def __init__(self, docs: Sequence[Document], allow_writes: bool = False) -> None:
        check_sandbox()
        self._tmp = tempfile.TemporaryDirectory(prefix="agentic_search_")  # τ³'s name, as `pwd` shows it
        root = Path(self._tmp.name)
        root.chmod(0o755)  # as τ³'s mkdir leaves it, as `ls -la` shows it (the documents are not secret)
        self.kb_dir = root / "knowledge_base"
        self.kb_dir.mkdir()
        self.settings = root / "srt-settings.json"
        self.allow_writes = allow_writes
        self.settings.write_text(json.dumps({
            "network": {"allowedDomains": [], "deniedDomains": []},
            "filesystem": {"denyRead": ["~/.ssh", "~/.aws", "~/.config", "~/.gnupg", "/etc/passwd", "/etc/shadow"],
                           "allowWrite": [str(self.kb_dir)] if allow_writes else [],
                           "denyWrite": [str(self.settings)]}}, indent=2))
        export(docs, self.kb_dir)

    def argv(self, command: str) -> list[str]:
        """The process that runs ``command`` sandboxed."""
        return ["srt", "--settings", str(self.settings), command]

    def run(self, command: str, timeout: float = TIMEOUT_S) -> tuple[int, str, str]:
        """``(exit code, stdout, stderr)`` of ``command`` in the documents' folder, as τ³ reports them."""
        blocked = escape(command)
        if blocked:
            return 1, "", f"Error: Command blocked - contains '{blocked}' which could escape the sandbox"
        try:
            done = capped_run(self.argv(command), timeout=timeout, cwd=self.kb_dir)  # τ³: subprocess.run
        except subprocess.TimeoutExpired:
            return 124, "", f"Command timed out after {timeout:g} seconds"
        except FileNotFoundError:
            raise SandboxError("sandbox-runtime (srt) is no longer on PATH") from None
        except Exception as exc:  # noqa: BLE001 - τ³ reports any other failure to the agent
            return 1, "", f"Command failed: {exc}"
        out, err = sanitize(done.stdout), sanitize(done.stderr)
        if "sandbox dependencies are not available" in (out + err).lower():
            raise SandboxError(f"sandbox-runtime reports missing system dependencies: {(out + err).strip()[:300]}")
        return done.returncode, out, err

    def close(self) -> None:
        self._tmp.cleanup()


def export(docs: Sequence[Document], folder: Path) -> None:
    """Every document as ``<id>.md`` and the ``INDEX.md`` that lists them by id (τ³'s ``md`` format)."""
    for doc in docs:
        (folder / f"{file_stem(doc.id)}.md").write_text(f"# {doc.title}\n\n{doc.content}")
    lines = ["# Knowledge Base Index\n\n", f"**Total documents:** {len(docs)}\n\n", "## Documents\n\n"]
    lines += [f"- **{file_stem(d.id)}.md** - {d.title}\n" for d in sorted(docs, key=lambda d: d.id)]
    (folder / "INDEX.md").write_text("".join(lines))


def shell_text(sandbox: Sandbox, command: str) -> str:
    """What τ³'s ``shell`` tool answers: the output, ``(no output)``, or the error with its exit code."""
    code, out, err = sandbox.run(command)
    if code == 0:
        return out or "(no output)"
    if code == 1 and "grep" in command and not err:  # grep's "no match" is not an error
        return "No matches found."
    return f"Error (exit code {code}): {err}" if err else f"Command failed with exit code {code}"
