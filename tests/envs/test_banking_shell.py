"""banking_knowledge's shell variants (``terminal_use[_write]``, ``alltools``): τ³'s sandbox behaviour.

The parts that need no sandbox (escape check, output cleaning, exported files, the tool's answers) are
checked everywhere; commands through Anthropic's sandbox-runtime run where ``srt`` and its tools are
installed (``npm install -g @anthropic-ai/sandbox-runtime@0.0.23``; Linux: ripgrep, bubblewrap, socat).
"""

from __future__ import annotations

import getpass
import shutil
import sys

import numpy as np
import pytest

from memrl.envs.domain import load_domain
from memrl.envs.domains.banking_knowledge import sandbox as sb
from memrl.envs.domains.banking_knowledge.retrieval import Document
from memrl.envs.messages import ToolCall

HAVE_SRT = all(shutil.which(b) for b in sb.REQUIRED.get("linux" if sys.platform.startswith("linux") else
                                                        sys.platform, ("srt",)))
needs_srt = pytest.mark.skipif(not HAVE_SRT, reason="sandbox-runtime (srt) and its tools are not installed")
DOCS = [Document("doc_b/1", "Beta card", "fees: none"), Document("doc_a", "Alpha", "cash back 2%")]


@pytest.mark.parametrize("command, found", [
    ("ls -la", None), ("grep -r 'credit card' .", None), ("cat '../x'", None), ('grep "a/b" *.md', None),
    ("cat ../secret", ".."), ("cat /etc/hosts", "absolute path: /etc/hosts"), ("ls; cat /x", "absolute path: /x"),
    ("ls ~", "~"), ("echo $HOME", "$HOME"), ("echo ${HOME}", "$HOME"), ("/bin/ls", "absolute path: /bin/ls"),
])
def test_escape_patterns_are_taus(command, found):
    assert sb.escape(command) == found


def test_output_hides_owner_date_and_home(monkeypatch):
    user = "alice"
    monkeypatch.setattr(getpass, "getuser", lambda: user)
    raw = (f"-rw-r--r-- 1 {user} staff 1234 Nov 29 06:58 doc_a.md\n"
           f"drwxr-xr-x  5 {user}  wheel  160 Jan 11 21:44 knowledge_base\nsee /home/{user}/x and /home/{user}\n")
    assert sb.sanitize(raw) == ("-rw-r--r-- 1 kb_user  kb_group  1234 Jan  1 00:00 doc_a.md\n"
                                "drwxr-xr-x  5 kb_user  kb_group  160 Jan  1 00:00 knowledge_base\n"
                                "see /home/kb_user/x and /home/kb_user\n")


def test_documents_are_exported_as_tau3_does(tmp_path):
    sb.export(DOCS, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["INDEX.md", "doc_a.md", "doc_b_1.md"]
    assert (tmp_path / "doc_b_1.md").read_text() == "# Beta card\n\nfees: none"
    assert (tmp_path / "INDEX.md").read_text() == (
        "# Knowledge Base Index\n\n**Total documents:** 2\n\n## Documents\n\n"
        "- **doc_a.md** - Alpha\n- **doc_b_1.md** - Beta card\n")


class Scripted:
    """A stand-in sandbox whose ``run`` answers what the test says (no process is started)."""

    def __init__(self, answer):
        self.answer = answer

    def run(self, command):
        return self.answer


@pytest.mark.parametrize("answer, command, text", [
    ((0, "a.md\n", ""), "ls", "a.md\n"), ((0, "", ""), "true", "(no output)"),
    ((1, "", ""), "grep nope *.md", "No matches found."), ((1, "", ""), "false", "Command failed with exit code 1"),
    ((2, "", "ls: x: No such file"), "ls x", "Error (exit code 2): ls: x: No such file"),
    ((1, "", "grep: bad"), "grep '(' *.md", "Error (exit code 1): grep: bad"),
])
def test_shell_answers_as_tau3(answer, command, text):
    assert sb.shell_text(Scripted(answer), command) == text


def test_missing_sandbox_runtime_is_one_line(monkeypatch):
    monkeypatch.setattr(sb.shutil, "which", lambda name: None if name == "srt" else "/usr/bin/" + name)
    with pytest.raises(sb.SandboxError, match=r"^the shell retrieval variants run commands through "
                                              r"sandbox-runtime; missing: srt \(install: npm install -g "):
        sb.check_sandbox()


@needs_srt
def test_commands_run_sandboxed(tmp_path):
    box = sb.Sandbox(DOCS)
    try:
        assert box.run("LC_ALL=C ls") == (0, "INDEX.md\ndoc_a.md\ndoc_b_1.md\n", "")  # C: the same order anywhere
        assert sb.shell_text(box, "grep -l 'cash back' *.md") == "doc_a.md\n"
        assert sb.shell_text(box, "grep -l nothing *.md") == "No matches found."
        code, _, err = box.run("echo x > new.md")
        assert code != 0 and "Read-only file system" in err  # terminal_use: no writes
        assert sb.shell_text(box, "cat ../srt-settings.json").startswith(
            "Error (exit code 1): Error: Command blocked - contains '..'")
        assert box.run("sleep 5", timeout=0.5) == (124, "", "Command timed out after 0.5 seconds")
        folder = box.kb_dir
    finally:
        box.close()
    assert not folder.exists()  # the sandbox's own temporary folder, and nothing else, is removed
    writable = sb.Sandbox(DOCS, allow_writes=True)
    try:
        assert writable.run("echo x > notes.md && cat notes.md") == (0, "x\n", "")
    finally:
        writable.close()


def embed(texts):
    """A bag-of-words stand-in for an embedding model."""
    vocab = ["card", "fee", "account", "dispute", "loan"]
    return np.array([[t.lower().count(w) + 1e-3 for w in vocab] for t in texts])


@pytest.fixture
def bank(tau2_dir):
    if not (tau2_dir / "banking_knowledge" / "documents").is_dir():
        pytest.skip(f"no banking_knowledge data in {tau2_dir}")
    return lambda **opts: load_domain("banking_knowledge", tau2_dir, tool_options=opts)


def test_shell_variants_refuse_to_start_without_a_sandbox(bank, monkeypatch):
    monkeypatch.setattr(sb.shutil, "which", lambda name: None)
    with pytest.raises(ValueError, match="run commands through sandbox-runtime; missing: srt"):
        bank(retrieval_variant="terminal_use")


@needs_srt
def test_shell_variants_in_the_domain(bank):
    use = bank(retrieval_variant="terminal_use").new_env()
    assert [s["function"]["name"] for s in use.tool_schemas()][:2] == ["shell", "transfer_to_human_agents"]
    listing = use.step(ToolCall("shell", {"command": "head -3 INDEX.md"})).content
    assert listing == "# Knowledge Base Index\n\n**Total documents:** 698\n"
    write = bank(retrieval_variant="terminal_use_write")
    one, two = write.new_env(), write.new_env()
    assert one.step(ToolCall("shell", {"command": "echo note > mine.md && ls mine.md"})).content == "mine.md\n"
    assert two.step(ToolCall("shell", {"command": "ls mine.md"})).content.startswith("Error (exit code 2)")

    every = bank(retrieval_variant="alltools", embedder="tests.envs.test_banking_shell:embed").new_env()
    names = [s["function"]["name"] for s in every.tool_schemas()][:4]
    assert names == ["KB_search_bm25", "KB_search_dense", "shell", "transfer_to_human_agents"]
    assert ("The `KB_search_dense` tool uses **OpenAI API** with embedding model `text-embedding-3-large` for "
            "dense retrieval." in every.policy) and "{{" not in every.policy
    two_hits = every.step(ToolCall("KB_search_bm25", {"query": "debit card dispute", "k": 2})).content
    assert [ln for ln in two_hits.split("\n") if ln.startswith("   ID: ")].__len__() == 2
    with pytest.raises(ValueError, match="needs tool option embedder"):
        bank(retrieval_variant="alltools-qwen")
