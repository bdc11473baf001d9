"""Read a training run or an eval folder into one JSON-able payload for ``memrl view``.

A run (``RUN/metrics.jsonl`` + ``RUN/rollouts/step_*.jsonl``) gives curves and per-token
episodes; an eval folder (``episodes/**.json``, ``transcripts/**.txt``, ``results.json``) gives
episodes as their records hold them: tool-agent records carry ``info.messages``, long-context
records carry per-conversation token counts and a transcript with each conversation's text.
Where the eval also wrote rollout records (``rollouts/**.jsonl``, :mod:`memrl.eval.records`), each
episode's conversations come from them, per token with the engine's log-probs, as a run's do.

The browser has no tokenizer, so the response tokens are decoded here, one string per token,
with the run's tokenizer. When it cannot be loaded (offline, deleted folder) the page falls back
to the decoded ``text`` fields the records carry and says so.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from memrl.io.metrics import numeric_keys, read_rows
from memrl.view.episodes import (anchor_counts, conversation_spans, eval_episode, run_episode,  # noqa: F401
                                  token_strings, transcript_conversations)
from memrl.view.grading import folder_grader, grader_view
from memrl.view.records import read_json_object, read_jsonl, shown_or_skipped, usable_rollout

Warn = Callable[[str], None]
_TOKENIZERS: dict[str, Any] = {}
# What a served page fetches when an episode is opened (the list needs none of it).
DETAIL_KEYS = ("conversations", "messages", "transcript", "grader")
PLOT_LIMIT = 4_000_000  # bytes of accuracy.png embedded in the page (matplotlib writes ~50 kB)
# Training-curve panels: (title, metrics.jsonl keys drawn in it). Panels with no data are left out.
CURVE_PANELS: list[tuple[str, list[str]]] = [
    ("reward", ["reward"]), ("eval accuracy", ["eval/accuracy"]), ("response tokens", ["response_tokens"]),
    ("KL", ["kl"]), ("entropy", ["entropy"]), ("grad norm", ["grad_norm"]),
    ("engine vs trainer log-prob", ["logprob_mismatch"]),
    ("time per step (s)", ["time/rollout", "time/logprob", "time/update", "time/sync"]),
]


MORE_LIMIT = 120  # at most this many extra curves (a metric per tool, say, could make thousands)


def more_panels(rows: list[dict[str, Any]], limit: int | None = MORE_LIMIT) -> list[tuple[str, list[str]]]:
    """One panel per numeric ``metrics.jsonl`` key that :data:`CURVE_PANELS` does not draw.

    Why: a workflow's own metrics (``ep.metric``: chunks read, tool calls, invalid calls), the rollout
    corrections' diagnostics and anything a user logs land in metrics.jsonl under names the fixed panels do
    not know. They are shown one key per panel (their scales differ by orders of magnitude), grouped by the
    prefix before ``/`` and then by name, so ``rollout_corr/*`` sit together.
    """
    drawn = {k for _, keys in CURVE_PANELS for k in keys}
    keys = sorted((k for k in numeric_keys(rows) if k not in drawn),
                  key=lambda k: (k.split("/")[0] if "/" in k else "", k))
    return [(k, [k]) for k in keys[:limit]]


def _warn_stderr(msg: str) -> None:
    print(f"warning: {msg}", file=sys.stderr)


def is_run(path: Path) -> bool:
    """A training run, also one that has logged nothing yet (only the config memrl train recorded)."""
    if (path / "metrics.jsonl").is_file() or (path / "rollouts").is_dir() or (path / "checkpoints").is_dir():
        return True
    try:
        from memrl.train.preflight import RUN_CONFIG_HEADER

        return (path / "config.yaml").read_text(encoding="utf-8", errors="replace").startswith(RUN_CONFIG_HEADER)
    except OSError:
        return False


def is_eval(path: Path) -> bool:
    return (path / "episodes").is_dir()


def run_tokenizer_spec(run_dir: Path) -> str | None:
    """``model.tokenizer`` (else ``model.path``) of the run's saved config."""
    return _spec_of(run_dir / "config.yaml")


def _spec_of(cfg: Path) -> str | None:
    if not cfg.is_file():
        return None
    saved = yaml.safe_load(cfg.read_text()) or {}
    model = saved.get("model") or {}
    options = ((saved.get("workflow") or {}).get("options") or {})
    if options.get("tool_protocol") == "openai_chat" and not model.get("tokenizer"):
        return None  # episodes over a chat API hold no tokens, and model.path may be an API name (gpt-4.1)
    spec = model.get("tokenizer") or model.get("path")
    return str(spec) if spec else None


def get_tokenizer(spec: str | None, warn: Warn) -> Any | None:
    """The tokenizer for ``spec``, loaded once per process (the server reloads pages often); a hub id the
    folder's config names only from the local cache (viewing a folder downloads nothing it names)."""
    if not spec:
        return None
    if spec not in _TOKENIZERS:
        try:
            from memrl.models.resolve import load_tokenizer

            _TOKENIZERS[spec] = load_tokenizer(spec, local_only=True)
        except Exception as exc:  # any failure means the text fallback, never a broken page
            warn(f"tokenizer {spec!r} not loaded ({exc}); showing responses as decoded text, not per token")
            _TOKENIZERS[spec] = None
    return _TOKENIZERS[spec]


def require_tokenizer(spec: str) -> Any:
    """A tokenizer named with ``--tokenizer``, loaded now (and kept for :func:`get_tokenizer`): one asked for
    by name that fails is the user's mistake, an error in one line, not a warning and a page without tokens."""
    from memrl.models.resolve import load_tokenizer

    if _TOKENIZERS.get(spec) is None:
        try:
            _TOKENIZERS[spec] = load_tokenizer(spec)
        except Exception as exc:  # noqa: BLE001 - whatever transformers raises, told in one line
            said = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            said = said.removeprefix(f"{spec}: ")  # memrl's own messages start with the path
            raise ValueError(f"--tokenizer {spec}: {said}") from None
    return _TOKENIZERS[spec]


def eval_tokenizer_spec(out: Path) -> str | None:
    """The same for an eval folder, from the settings it was written with (``eval_config.yaml``)."""
    return _spec_of(out / "eval_config.yaml")


def with_rollout(ep: dict[str, Any], out: Path, tokenizer: Any | None, warn: Warn = _warn_stderr) -> dict[str, Any]:
    """``ep`` with its conversations read from the eval's rollout record, when there is one (and it is sound)."""
    from memrl.eval.records import ROLLOUTS, read_record

    record = read_record(out, ep["id"])
    where = f"{out / ROLLOUTS / ep['id']}.jsonl:1"
    if record is None and (out / ROLLOUTS / f"{ep['id']}.jsonl").is_file():
        warn(f"{where}: not a JSON record (the per-token view of this episode is not shown)")
    if not isinstance(record, dict) or not record.get("conversations"):
        return ep
    if not usable_rollout(record, where, warn):
        return ep
    full = shown_or_skipped(lambda: run_episode(record, ep["id"], tokenizer), where, warn)
    if full is None:
        return ep
    convs = full["conversations"]
    return {**ep, "conversations": convs, "length": sum(c["generated"] for c in convs), "transcript": None}


def parse_steps(spec: str) -> Callable[[int], bool]:
    """``"5"``, ``"10-20"``, ``"100-"`` or a comma list of them, as a test on a step number."""
    ranges: list[tuple[int, float]] = []
    for part in (p.strip() for p in spec.split(",")):
        m = re.fullmatch(r"(\d+)(?:\s*-\s*(\d*))?", part)
        if not m:
            raise ValueError(f"--steps: {part!r} is not a step, A-B or A- (e.g. --steps 1,10-20,100-)")
        lo = int(m.group(1))
        hi: float = lo if m.group(2) is None else (int(m.group(2)) if m.group(2) else float("inf"))
        if hi < lo:
            raise ValueError(f"--steps: {part!r} ends before it starts")
        ranges.append((lo, hi))
    return lambda step: any(lo <= step <= hi for lo, hi in ranges)


def rollout_files(run_dir: Path, steps: str | None = None, last: int | None = None) -> tuple[list[Path], list[int]]:
    """The rollout files to show (``--steps``, then the ``--last`` N of them) and every saved step.

    A long run saves a file per step: a page of all of them can be hundreds of MB, so a person
    picks the steps to look at.
    """
    found = []
    for path in (run_dir / "rollouts").glob("step_*.jsonl"):
        m = re.fullmatch(r"step_(\d+)\.jsonl", path.name)
        if m:
            found.append((int(m.group(1)), path))
    found.sort()
    chosen = [(n, p) for n, p in found if steps is None or parse_steps(steps)(n)]
    if last is not None:
        if last < 1:
            raise ValueError(f"--last must be >= 1, got {last}")
        chosen = chosen[-last:]
    return [p for _, p in chosen], [n for n, _ in found]


def summary_only(episode: dict[str, Any]) -> dict[str, Any]:
    """The list's view of an episode: the server sends the rest when it is opened (``lazy``)."""
    return {**{k: v for k, v in episode.items() if k not in DETAIL_KEYS}, "lazy": True}


def load_run(run_dir: Path, tokenizer: str | None = None, warn: Warn = _warn_stderr, *,
             steps: str | None = None, last: int | None = None, lazy: bool = False) -> dict[str, Any]:
    spec = tokenizer or run_tokenizer_spec(run_dir)
    tok = get_tokenizer(spec, warn)
    metrics = read_rows(run_dir / "metrics.jsonl", warn, skip_bad=True) if (run_dir / "metrics.jsonl").is_file() else []
    files, saved = rollout_files(run_dir, steps, last)
    grader = None if lazy else folder_grader(run_dir, warn)
    episodes = []
    for path in files:
        records = read_jsonl(path, warn)
        anchors = anchor_counts(rec for _, rec in records)
        for i, (line, rec) in enumerate(records):
            ep_id, where = f"{int(path.stem.split('_')[1])}-{i}", f"{path}:{line}"
            if not usable_rollout(rec, where, warn):
                continue
            ep = shown_or_skipped(lambda: summary_only(run_episode(rec, ep_id, None, anchors)) if lazy
                                  else graded(run_episode(rec, ep_id, tok, anchors), rec, grader, warn), where, warn)
            if ep is not None:
                episodes.append(ep)
    return {"kind": "run", "title": run_dir.resolve().name, "source": str(run_dir), "tokenizer": spec,
            "per_token": tok is not None, "metrics": metrics, "panels": CURVE_PANELS,
            "more_panels": more_panels(metrics), "more_total": len(more_panels(metrics, None)), "results": None,
            "saved_steps": len(saved), "shown_steps": len(files), "group_size": group_size(run_dir),
            "episodes": episodes}


def group_size(run_dir: Path) -> int | None:
    """Episodes sampled per prompt (``algorithm.n``): a step's file keeps only some of each group."""
    cfg = run_dir / "config.yaml"
    try:
        n = ((yaml.safe_load(cfg.read_text(encoding="utf-8")) or {}).get("algorithm") or {}).get("n")
    except (OSError, yaml.YAMLError, AttributeError):
        return None
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def graded(ep: dict[str, Any], record: dict[str, Any], grader: Any, warn: Warn) -> dict[str, Any]:
    """``ep`` with the grader's checks of a tool-agent episode (see :mod:`memrl.view.grading`)."""
    view = grader_view(grader, record, warn)
    return {**ep, "grader": view} if view is not None else ep


def results_plot(out: Path, warn: Warn) -> str | None:
    """``accuracy.png`` as a data URI, so the one-file page carries it (a PNG only, of sane size)."""
    import base64

    path = out / "accuracy.png"
    if not path.is_file():
        return None
    data = path.read_bytes()[:PLOT_LIMIT + 1]
    if not data.startswith(b"\x89PNG\r\n\x1a\n") or len(data) > PLOT_LIMIT:
        warn(f"{path}: not a PNG of at most {PLOT_LIMIT // 1_000_000} MB (not shown)")
        return None
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def load_eval(out: Path, warn: Warn = _warn_stderr, *, lazy: bool = False,
              tokenizer: str | None = None) -> dict[str, Any]:
    has_rollouts = (out / "rollouts").is_dir()
    spec = (tokenizer or eval_tokenizer_spec(out)) if has_rollouts else None
    tok = get_tokenizer(spec, warn) if has_rollouts else None
    grader = None if lazy else folder_grader(out, warn)
    episodes = []
    for path in sorted((out / "episodes").rglob("*.json"), key=lambda p: _natural(p.relative_to(out).as_posix())):
        rel = path.relative_to(out / "episodes").with_suffix("")
        rec = read_json_object(path, warn)
        if rec is None:
            continue
        tpath = out / "transcripts" / rel.with_suffix(".txt")
        transcript = tpath.read_text(encoding="utf-8", errors="replace") if tpath.is_file() else None
        ep = shown_or_skipped(lambda: eval_episode(rec, rel.as_posix(), transcript), str(path), warn)
        if ep is not None:
            ep = summary_only(ep) if lazy else graded(with_rollout(ep, out, tok, warn) if has_rollouts else ep,
                                                      rec, grader, warn)
            episodes.append(ep)
    results = read_json_object(out / "results.json", warn) if (out / "results.json").is_file() else None
    if results is not None:
        results.pop("per_task", None)  # the episodes show it; keep the page small
    return {"kind": "eval", "title": out.resolve().name, "source": str(out), "tokenizer": spec,
            "per_token": tok is not None, "metrics": [], "panels": [], "more_panels": [], "results": results,
            "plot": results_plot(out, warn), "episodes": episodes}


def _natural(s: str) -> list[Any]:
    """Sort key where ``10`` follows ``9`` (episode files are named by index)."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s)]


def load_episode(path: Path, ep_id: str, tokenizer: str | None = None,
                 warn: Warn = _warn_stderr) -> dict[str, Any] | None:
    """One whole episode by the id the payload gave it, or None; ids never reach outside the folder."""
    path = Path(path)
    if is_eval(path):
        root = (path / "episodes").resolve()
        try:  # an id with a NUL byte or longer than a file name can be is no episode, not a server error
            file = (root / f"{ep_id}.json").resolve()
            if not file.is_relative_to(root) or not file.is_file():
                return None
        except (ValueError, OSError):
            return None
        rel = file.relative_to(root).with_suffix("")
        tpath = path / "transcripts" / rel.with_suffix(".txt")
        transcript = tpath.read_text(encoding="utf-8", errors="replace") if tpath.is_file() else None
        rec = read_json_object(file, warn)
        ep = None if rec is None else shown_or_skipped(lambda: eval_episode(rec, rel.as_posix(), transcript),
                                                         str(file), warn)
        if ep is None:
            return None
        if (path / "rollouts").is_dir():
            ep = with_rollout(ep, path, get_tokenizer(tokenizer or eval_tokenizer_spec(path), warn), warn)
        return graded(ep, rec, folder_grader(path, warn), warn)
    m = re.fullmatch(r"(\d{1,9})-(\d{1,9})", ep_id)  # longer numbers name no file (and int() would refuse them)
    file = path / "rollouts" / f"step_{int(m.group(1)):06d}.jsonl" if m else None
    if file is None or not file.is_file():
        return None
    records = read_jsonl(file, warn)
    if int(m.group(2)) >= len(records):
        return None
    line, rec = records[int(m.group(2))]
    if not usable_rollout(rec, f"{file}:{line}", warn):
        return None
    tok = get_tokenizer(tokenizer or run_tokenizer_spec(path), warn)
    anchors = anchor_counts(r for _, r in records)
    return shown_or_skipped(lambda: graded(run_episode(rec, ep_id, tok, anchors), rec, folder_grader(path, warn),
                                           warn),
                            f"{file}:{line}", warn)


def load_payload(path: Path, tokenizer: str | None = None, warn: Warn = _warn_stderr, *,
                 steps: str | None = None, last: int | None = None, lazy: bool = False) -> dict[str, Any]:
    """A run or an eval folder as the page's payload; anything else is a clear error.

    ``steps`` / ``last`` pick a run's rollout steps (see :func:`rollout_files`); an eval folder
    has no steps, so they are refused there rather than ignored. ``lazy`` leaves out what
    :func:`load_episode` gives when an episode is opened (the server's page).
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a folder")
    if is_eval(path):
        if steps is not None or last is not None:
            raise ValueError("--steps and --last pick a training run's rollout steps; this is an eval folder")
        return load_eval(path, warn, lazy=lazy, tokenizer=tokenizer)
    if is_run(path):
        return load_run(path, tokenizer, warn, steps=steps, last=last, lazy=lazy)
    inner = sorted(p.name for p in path.iterdir() if p.is_dir() and (is_eval(p) or is_run(p)))
    if inner:  # memrl eval --domain a,b,c writes one eval per domain
        more = f" (also {', '.join(inner[1:])})" if len(inner) > 1 else ""
        raise ValueError(f"{path} holds {len(inner)} eval or run folder(s) (memrl eval --domain a,b writes one per "
                         f"domain): view one, e.g. memrl view {path / inner[0]}{more}")
    raise ValueError(f"{path} is neither a training run (metrics.jsonl, rollouts/) nor an eval folder (episodes/)")
