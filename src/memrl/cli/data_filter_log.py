"""What ``memrl data filter`` has asked so far, kept beside its output so an interrupted run goes on.

Asking thousands of questions of one or two models takes hours (MemAgent's filter asks ~50k twice of two
models). Each settled (model, question) pair is appended to ``OUT.filter.partial.jsonl`` as it comes back;
a run of the same command reads it and asks only the rest, and a finished run removes it. The file's first
line names the settings the answers were asked under: answers asked under other settings (another model,
input, temperature...) are never mixed in; the run stops and says which setting differs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any


class AskedLog:
    """The answers settled so far: ``(model position, sample index) -> closed-book answer or None``."""

    def __init__(self, out: Path, settings: dict[str, Any]) -> None:
        self.path = out.with_name(out.name + ".filter.partial.jsonl")
        self.settings = settings
        self.settled: dict[tuple[int, int], str | None] = {}
        self._fh: IO[str] | None = None

    def load(self) -> int:
        """Read an earlier run's answers (none if there was none); how many. ValueError, naming the setting,
        when they were asked under other settings."""
        if not self.path.is_file():
            return 0
        lines = self.path.read_text(encoding="utf-8").splitlines()
        try:
            head = json.loads(lines[0]) if lines else None
        except json.JSONDecodeError:
            head = None
        if not isinstance(head, dict):  # cut before its first line was whole
            raise ValueError(f"{self.path} does not start with the settings line of a filter log: delete it to "
                             "start over")
        differ = sorted(k for k in self.settings.keys() | head.keys() if head.get(k) != self.settings.get(k))
        if differ:
            raise ValueError(f"{self.path} holds answers asked with other settings ({', '.join(differ)} differ): "
                             "run the command that wrote it again, or delete the file to start over")
        for line in lines[1:]:
            try:
                row = json.loads(line)
                self.settled[(int(row["model"]), int(row["index"]))] = row["hit"]
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                continue  # a line cut short by the interrupt: that question is asked again
        return len(self.settled)

    def record(self, model: int, index: int, hit: str | None) -> None:
        """Append one settled answer (flushed, so a crash keeps it)."""
        if self._fh is None:
            new = not self.path.is_file()
            cut = not new and not self.path.read_bytes().endswith(b"\n")  # the interrupt cut a line short
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = self.path.open("a", encoding="utf-8")
            if new:
                self._fh.write(json.dumps(self.settings) + "\n")
            elif cut:
                self._fh.write("\n")
        self.settled[(model, index)] = hit
        self._fh.write(json.dumps({"model": model, "index": index, "hit": hit}) + "\n")
        self._fh.flush()

    def kept_note(self) -> str:
        """The clause a stop message ends with: where the answers so far are kept (empty when none were)."""
        if not self.settled:
            return ""
        return (f"; the {len(self.settled)} answers so far are kept in {self.path}: the same command goes on "
                "from them")

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def finish(self) -> None:
        """The output is written: the answers are in its report, the log goes."""
        self.close()
        self.path.unlink(missing_ok=True)
