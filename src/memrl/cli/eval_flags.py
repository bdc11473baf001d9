"""``memrl eval``'s flags: each one's type and help, and the values of one invocation as one object.

Why a module of its own: the command takes 26 flags; declared inline they made its signature 60
lines long and every helper a list of eight positional arguments. Here each flag is an
``Annotated`` alias the command's signature names in one line, and :class:`EvalArgs` carries the
parsed values to the helpers that check and run them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

ConfigArg = Annotated[Optional[Path], typer.Argument(help="YAML config (optional).")]
OverridesArg = Annotated[Optional[list[str]], typer.Argument(
    help="Dotted overrides, e.g. workflow.options.chunk_tokens=2000.")]
ModelFlag = Annotated[Optional[str], typer.Option(
    "--model", "-m", help="Model folder, hub id or alias (tiny, smollm2-135m-instruct). With --engine openai: the "
    "tokenizer source and default served model name (a tool agent over tool_protocol=openai_chat loads no "
    "tokenizer: any served name, e.g. gpt-4.1-2025-04-14).")]
WorkflowFlag = Annotated[Optional[str], typer.Option(
    "--workflow", "-w", help="memagent | rememr1 | full_context | tool_agent (tasks of --domain/--split, --trials "
    "each, pass^k) | agent (a program: workflow.options.program or command), or your own as package.module:Class.")]
DataFlag = Annotated[Optional[Path], typer.Option(
    "--data", help="Folder with eval_{N}.json files (from memrl data synth) or ReMemR1's eval_{dataset}_{N}.json; "
    "also a prefix (DIR/eval_hotpotqa) or a pattern with {n} (min-distance files); --suite ruler: the RULER data "
    "folder; or one file of samples (JSONL, JSON or parquet) for any workflow.")]
DocsFlag = Annotated[Optional[str], typer.Option(
    "--docs", "-d", help="Comma-separated document counts to evaluate (--suite qa on a folder of eval_{N}.json "
    "files; not with --data FILE); --suite ruler: context lengths (default: all).")]
SuiteFlag = Annotated[str, typer.Option("--suite", help="qa (long-context QA files) | ruler (RULER tasks).")]
TasksFlag = Annotated[Optional[str], typer.Option(
    "--tasks", help="--suite ruler: comma-separated task names (default: all).")]
EngineFlag = Annotated[Optional[str], typer.Option(
    "--engine", "-e", help="hf (in-process, default) | openai | vllm.")]
BaseUrlFlag = Annotated[Optional[str], typer.Option("--base-url", help="openai engine: server URL ending in /v1.")]
OutFlag = Annotated[Path, typer.Option("--out", "-o", help="Results folder; re-running resumes.")]
MaxSamplesFlag = Annotated[Optional[int], typer.Option(
    "--max-samples", help="First K samples of each file (K >= 1).")]
TemperatureFlag = Annotated[Optional[float], typer.Option(
    "--temperature", help="Overrides sampling.temperature; unset everywhere: 0 = greedy (protocol memrl) or 0.7 "
    "(protocols memagent, rememr1).")]
TopPFlag = Annotated[Optional[float], typer.Option(
    "--top-p", help="Overrides sampling.top_p (default 1.0; 0.95 under protocols memagent, rememr1).")]
ProtocolFlag = Annotated[Optional[str], typer.Option(
    "--protocol", help="eval.protocol: memrl (one-way sub-EM, default) | memagent | rememr1 (the papers' scripts: "
    "bidirectional sub-EM against the first gold; sampled at 0.7 / 0.95 over whole contexts unless a flag or "
    "override says otherwise).")]
RepeatsFlag = Annotated[Optional[int], typer.Option(
    "--repeats", help="eval.repeats: K samples per question; reports mean accuracy and pass@K (MemAgent's "
    "--sampling).")]
DomainFlag = Annotated[Optional[str], typer.Option(
    "--domain", help="tool_agent: env.domain (library, mock, retail, airline, telecom, telecom-workflow, or "
    "package.module:factory); several comma-separated (airline,retail,telecom): one folder each in --out and the "
    "tau2 leaderboard's Overall.")]
SplitFlag = Annotated[Optional[str], typer.Option(
    "--split", help="tool_agent: env.eval_split (e.g. test, small, base).")]
DataDirFlag = Annotated[Optional[str], typer.Option(
    "--data-dir", help="tool_agent: env.data_dir (a tau2-bench clone or its domains folder).")]
TrialsFlag = Annotated[int, typer.Option("--trials", help="tool_agent: episodes per task; reports pass^1..pass^K.")]
TaskIdsFlag = Annotated[Optional[str], typer.Option(
    "--task-ids", help="tool_agent: only these tasks of --split, comma-separated (env.task_ids; tau2-bench's "
    "--task-ids).")]
NumTasksFlag = Annotated[Optional[int], typer.Option(
    "--num-tasks", min=1, help="tool_agent: the first N tasks of --split (env.num_tasks; tau2-bench's --num-tasks).")]
MaxRetriesFlag = Annotated[Optional[int], typer.Option(
    "--max-retries", min=0, help="tool_agent: eval.max_retries, tries again at once of a trial that fails "
    "(tau2-bench's --max-retries; memrl's default 0: a failed trial waits for the next run).")]
ConcurrencyFlag = Annotated[Optional[int], typer.Option("--concurrency", help="Episodes in flight at once.")]
RolloutsFlag = Annotated[bool, typer.Option(
    "--rollouts/--no-rollouts", help="Also save each episode's tokens and log-probs as a rollout record in "
    "OUT/rollouts/ (what memrl sft/rft and memrl view read); --no-rollouts for long contexts where they are large.")]
RestartFlag = Annotated[bool, typer.Option(
    "--restart", help="Delete earlier results in --out first (only what memrl wrote there; refuses if the folder "
    "holds anything else).")]


@dataclass(frozen=True)
class EvalArgs:
    """The flags of one ``memrl eval`` invocation, as typer parsed them (names as in the command's signature)."""

    config: Path | None
    overrides: list[str] | None
    model: str | None
    workflow: str | None
    data: Path | None
    docs: str | None
    suite: str
    tasks: str | None
    engine: str | None
    base_url: str | None
    out: Path
    max_samples: int | None
    temperature: float | None
    top_p: float | None
    protocol: str | None
    repeats: int | None
    domain: str | None
    split: str | None
    data_dir: str | None
    trials: int
    task_ids: str | None
    num_tasks: int | None
    max_retries: int | None
    concurrency: int | None
    rollouts: bool
    restart: bool

    @property
    def domains(self) -> list[str] | None:
        """``--domain``'s comma-separated names (several: one folder each and the leaderboard's Overall)."""
        return [d.strip() for d in self.domain.split(",") if d.strip()] if self.domain else None

    def config_flags(self) -> dict[str, object]:
        """The flags that set a config key, by dotted key (None: not given)."""
        domains = self.domains
        return {
            "model.path": self.model, "workflow.name": self.workflow, "engine.kind": self.engine,
            "engine.base_url": self.base_url, "sampling.temperature": self.temperature, "sampling.top_p": self.top_p,
            "engine.concurrency": self.concurrency, "eval.protocol": self.protocol, "eval.repeats": self.repeats,
            "env.domain": domains[0] if domains else None, "env.eval_split": self.split, "env.data_dir": self.data_dir,
            "env.num_tasks": self.num_tasks, "eval.max_retries": self.max_retries,
            "env.task_ids": [t.strip() for t in self.task_ids.split(",") if t.strip()] if self.task_ids else None,
        }
