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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from memrl.train.tracking import read_metrics
from memrl.view.records import read_json_object, read_jsonl, shown_or_skipped, usable_rollout

Warn = Callable[[str], None]
# Record fields shown as the episode's summary when present (short, human-facing).
INFO_KEYS = ("question", "answers", "answer", "final_text", "ending", "note", "error", "task_id", "memory")
_TOKENIZERS: dict[str, Any] = {}
# What a served page fetches when an episode is opened (the list needs none of it).
DETAIL_KEYS = ("conversations", "messages", "transcript")
# Training-curve panels: (title, metrics.jsonl keys drawn in it). Panels with no data are left out.
CURVE_PANELS: list[tuple[str, list[str]]] = [
    ("reward", ["reward"]), ("eval accuracy", ["eval/accuracy"]), ("response tokens", ["response_tokens"]),
    ("KL", ["kl"]), ("entropy", ["entropy"]), ("grad norm", ["grad_norm"]),
    ("engine vs trainer log-prob", ["logprob_mismatch"]),
    ("time per step (s)", ["time/rollout", "time/logprob", "time/update", "time/sync"]),
]


def _warn_stderr(msg: str) -> None:
    print(f"warning: {msg}", file=sys.stderr)


def is_run(path: Path) -> bool:
    return (path / "metrics.jsonl").is_file() or (path / "rollouts").is_dir()


def is_eval(path: Path) -> bool:
    return (path / "episodes").is_dir()


def run_tokenizer_spec(run_dir: Path) -> str | None:
    """``model.tokenizer`` (else ``model.path``) of the run's saved config."""
    return _spec_of(run_dir / "config.yaml")


def _spec_of(cfg: Path) -> str | None:
    if not cfg.is_file():
        return None
    model = (yaml.safe_load(cfg.read_text()) or {}).get("model") or {}
    spec = model.get("tokenizer") or model.get("path")
    return str(spec) if spec else None


def get_tokenizer(spec: str | None, warn: Warn) -> Any | None:
    """The tokenizer for ``spec``, loaded once per process (the server reloads pages often)."""
    if not spec:
        return None
    if spec not in _TOKENIZERS:
        try:
            from memrl.models.resolve import load_tokenizer

            _TOKENIZERS[spec] = load_tokenizer(spec)
        except Exception as exc:  # any failure means the text fallback, never a broken page
            warn(f"tokenizer {spec!r} not loaded ({exc}); showing responses as decoded text, not per token")
            _TOKENIZERS[spec] = None
    return _TOKENIZERS[spec]


def token_strings(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """One string per token whose concatenation reads as the decoded text.

    A token that ends inside a multi-byte character decodes to U+FFFD on its own; its bytes are
    carried to the next token so the text shows the character once. Each token is decoded with a
    few tokens of left context, as incremental detokenizers do, so leading-space rules hold.
    """
    out: list[str] = []
    start = 0  # first token of the pending group (tokens not emitted yet)
    for i in range(len(ids)):
        ctx = ids[max(0, start - 4):start]
        prev = tokenizer.decode(ctx, skip_special_tokens=False)
        text = tokenizer.decode([*ctx, *ids[start:i + 1]], skip_special_tokens=False)
        if text.endswith("\ufffd") and i - start < 4 and i + 1 < len(ids):
            out.append("")
            continue
        piece = text[len(prev):] if text.startswith(prev) else tokenizer.decode(ids[start:i + 1],
                                                                                skip_special_tokens=False)
        out.append(piece)
        start = i + 1
    return out


def _round(values: Sequence[float] | None) -> list[float] | None:
    return None if values is None else [round(float(v), 4) for v in values]


def conversation_spans(conv: dict[str, Any], tokenizer: Any | None) -> list[dict[str, Any]]:
    """The conversation as ordered spans: ``prompt``, then ``gen`` (policy tokens) and ``ctx`` runs.

    ``gen`` spans hold per-token strings and the engine's and trainer's log-probs when the
    tokenizer is known; otherwise the record's decoded ``text`` is shown as prompt + response.
    """
    ids, mask = conv.get("token_ids") or [], conv.get("loss_mask") or []
    text = conv.get("text") or {}
    if tokenizer is None:
        spans = [{"kind": "prompt", "text": text.get("prompt", "")}]
        if text.get("response"):
            spans.append({"kind": "gen", "text": text["response"]})
        return spans
    split = next((i for i, m in enumerate(mask) if m), len(mask))
    spans = [{"kind": "prompt", "text": tokenizer.decode(ids[:split], skip_special_tokens=False)}]
    lps, tlps = conv.get("logprobs"), conv.get("trainer_logprobs")
    i = split
    while i < len(ids):
        j = i
        while j < len(ids) and mask[j] == mask[i]:
            j += 1
        if mask[i]:
            spans.append({"kind": "gen", "tokens": token_strings(tokenizer, ids[i:j]),
                          "lp": _round(lps[i:j] if lps else None), "tlp": _round(tlps[i:j] if tlps else None)})
        else:
            spans.append({"kind": "ctx", "text": tokenizer.decode(ids[i:j], skip_special_tokens=False)})
        i = j
    return spans


def _conv_stats(conv: dict[str, Any]) -> dict[str, Any]:
    mask = conv.get("loss_mask") or []
    gen = [k for k, m in enumerate(mask) if m]
    lps, tlps = conv.get("logprobs") or [], conv.get("trainer_logprobs") or []
    stats: dict[str, Any] = {"tokens": len(mask), "generated": len(gen)}
    if gen and lps:
        stats["mean_logprob"] = round(sum(lps[k] for k in gen) / len(gen), 4)
    if gen and lps and tlps:
        stats["max_mismatch"] = round(max(abs(lps[k] - tlps[k]) for k in gen), 4)
    return stats


def _summary(record: dict[str, Any]) -> dict[str, Any]:
    info = record.get("info") or {}
    return {k: info[k] for k in INFO_KEYS if k in info and info[k] not in (None, "", [])}


def run_episode(record: dict[str, Any], ep_id: str, tokenizer: Any | None) -> dict[str, Any]:
    """A rollout record (see :mod:`memrl.train.rollouts`) as the page shows it."""
    info = record.get("info") or {}
    convs = []
    for k, c in enumerate(record.get("conversations") or []):
        convs.append({"index": k, "reward": c.get("reward"), "meta": c.get("meta") or {},
                      "advantage": c.get("advantage"), **_conv_stats(c),
                      "spans": conversation_spans(c, tokenizer)})
    advs = [c["advantage"] for c in convs if c.get("advantage") is not None]
    return {"id": ep_id, "step": record.get("step"), "pick": record.get("pick"),
            "policy_version": record.get("policy_version"), "sample_id": str(record.get("sample_id", "")),
            "group_id": str(record.get("group_id", "")), "reward": record.get("reward"),
            "advantage": advs[0] if advs else None, "length": sum(c["generated"] for c in convs),
            "metrics": record.get("metrics") or {}, "breakdown": info.get("reward_breakdown") or {},
            "summary": _summary(record), "messages": info.get("messages") or [], "conversations": convs}


_CONV_HEAD = re.compile(r"^## conversation (\d+)/(\d+) ?\(?(.*?)\)?$", re.M)


def transcript_conversations(text: str) -> list[dict[str, str]]:
    """Prompt and response text of each conversation of a long-context eval transcript."""
    heads = list(_CONV_HEAD.finditer(text))
    out = []
    for h, nxt in zip(heads, [*heads[1:], None]):
        body = text[h.end():nxt.start() if nxt else len(text)]
        prompt, _, response = body.partition("\n### response (")
        prompt = re.sub(r"^\n?### prompt \(\d+ tokens\)\n", "", prompt)
        response = re.sub(r"^\d+ tokens\)\n", "", response)
        out.append({"prompt": prompt, "response": response.rstrip("\n")})
    return out


def eval_episode(record: dict[str, Any], ep_id: str, transcript: str | None) -> dict[str, Any]:
    """An eval record (long-context or tool agent) as the page shows it."""
    info = record.get("info") or {}
    texts = transcript_conversations(transcript) if transcript else []
    convs = []
    for k, c in enumerate(record.get("conversations") or []):
        meta = {key: v for key, v in c.items() if key not in ("prompt_tokens", "response_tokens")}
        t = texts[k] if k < len(texts) else {}
        spans = [{"kind": "prompt", "text": t.get("prompt", "")}]
        if t.get("response"):
            spans.append({"kind": "gen", "text": t["response"]})
        convs.append({"index": k, "meta": meta, "tokens": c.get("prompt_tokens", 0) + c.get("response_tokens", 0),
                      "generated": c.get("response_tokens", 0), "spans": spans})
    metrics = record.get("metrics") or {}
    length = sum(c["generated"] for c in convs) if convs else int(metrics.get("response_tokens", 0))
    sample = record.get("task_id", record.get("sample_id", ""))
    step = record.get("docs")
    return {"id": ep_id, "step": step, "pick": None, "sample_id": str(sample), "group_id": str(sample),
            "reward": record.get("reward"), "advantage": None, "length": length, "metrics": metrics,
            "breakdown": info.get("reward_breakdown") or {}, "summary": _summary(record),
            "messages": info.get("messages") or [], "conversations": convs,
            "trial": record.get("trial", record.get("repeat")),
            "transcript": transcript if not texts and not info.get("messages") else None}


def eval_tokenizer_spec(out: Path) -> str | None:
    """The same for an eval folder, from the settings it was written with (``eval_config.yaml``)."""
    return _spec_of(out / "eval_config.yaml")


def with_rollout(ep: dict[str, Any], out: Path, tokenizer: Any | None, warn: Warn = _warn_stderr) -> dict[str, Any]:
    """``ep`` with its conversations read from the eval's rollout record, when there is one (and it is sound)."""
    from memrl.eval.records import ROLLOUTS, read_record

    record = read_record(out, ep["id"])
    if not isinstance(record, dict) or not record.get("conversations"):
        return ep
    where = f"{out / ROLLOUTS / ep['id']}.jsonl:1"
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
    metrics = read_metrics(run_dir, warn) if (run_dir / "metrics.jsonl").is_file() else []
    files, saved = rollout_files(run_dir, steps, last)
    episodes = []
    for path in files:
        for i, (line, rec) in enumerate(read_jsonl(path, warn)):
            ep_id, where = f"{int(path.stem.split('_')[1])}-{i}", f"{path}:{line}"
            if not usable_rollout(rec, where, warn):
                continue
            ep = shown_or_skipped(lambda: summary_only(run_episode(rec, ep_id, None)) if lazy
                                  else run_episode(rec, ep_id, tok), where, warn)
            if ep is not None:
                episodes.append(ep)
    return {"kind": "run", "title": run_dir.resolve().name, "source": str(run_dir), "tokenizer": spec,
            "per_token": tok is not None, "metrics": metrics, "panels": CURVE_PANELS, "results": None,
            "saved_steps": len(saved), "shown_steps": len(files), "episodes": episodes}


def load_eval(out: Path, warn: Warn = _warn_stderr, *, lazy: bool = False,
              tokenizer: str | None = None) -> dict[str, Any]:
    has_rollouts = (out / "rollouts").is_dir()
    spec = (tokenizer or eval_tokenizer_spec(out)) if has_rollouts else None
    tok = get_tokenizer(spec, warn) if has_rollouts else None
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
            episodes.append(summary_only(ep) if lazy else with_rollout(ep, out, tok, warn) if has_rollouts else ep)
    results = read_json_object(out / "results.json", warn) if (out / "results.json").is_file() else None
    if results is not None:
        results.pop("per_task", None)  # the episodes show it; keep the page small
    return {"kind": "eval", "title": out.resolve().name, "source": str(out), "tokenizer": spec,
            "per_token": tok is not None, "metrics": [], "panels": [], "results": results, "episodes": episodes}


def _natural(s: str) -> list[Any]:
    """Sort key where ``10`` follows ``9`` (episode files are named by index)."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s)]


def load_episode(path: Path, ep_id: str, tokenizer: str | None = None,
                 warn: Warn = _warn_stderr) -> dict[str, Any] | None:
    """One whole episode by the id the payload gave it, or None; ids never reach outside the folder."""
    path = Path(path)
    if is_eval(path):
        root = (path / "episodes").resolve()
        file = (root / f"{ep_id}.json").resolve()
        if not file.is_relative_to(root) or not file.is_file():
            return None
        rel = file.relative_to(root).with_suffix("")
        tpath = path / "transcripts" / rel.with_suffix(".txt")
        transcript = tpath.read_text(encoding="utf-8", errors="replace") if tpath.is_file() else None
        rec = read_json_object(file, warn)
        ep = None if rec is None else shown_or_skipped(lambda: eval_episode(rec, rel.as_posix(), transcript),
                                                         str(file), warn)
        if ep is None or not (path / "rollouts").is_dir():
            return ep
        return with_rollout(ep, path, get_tokenizer(tokenizer or eval_tokenizer_spec(path), warn), warn)
    m = re.fullmatch(r"(\d+)-(\d+)", ep_id)
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
    return shown_or_skipped(lambda: run_episode(rec, ep_id, tok), f"{file}:{line}", warn)


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
    raise ValueError(f"{path} is neither a training run (metrics.jsonl, rollouts/) nor an eval folder (episodes/)")
