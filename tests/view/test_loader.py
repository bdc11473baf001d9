"""The payload ``memrl view`` builds from a training run and from eval folders."""

from __future__ import annotations

import json

import pytest

from memrl.models.resolve import load_tokenizer
from memrl.eval.transcript import render_transcript
from memrl.train.tracking import read_metrics
from memrl.types import Conversation, Trajectory
from memrl.view.loader import (MORE_LIMIT, conversation_spans, load_payload, more_panels, parse_steps,
                               rollout_files, token_strings, transcript_conversations)
from tests.view.conftest import TOOL_MESSAGES


def _records(run_dir):
    return [json.loads(line) for f in sorted((run_dir / "rollouts").glob("step_*.jsonl"))
            for line in f.read_text().splitlines()]


def test_run_payload_holds_every_rollout_per_token(run_dir):
    payload = load_payload(run_dir)
    records = _records(run_dir)
    assert payload["kind"] == "run" and payload["per_token"] and payload["tokenizer"] == "tiny"
    assert payload["metrics"] == read_metrics(run_dir) and len(payload["metrics"]) == 2
    assert len(payload["episodes"]) == len(records) == 6
    assert len({e["id"] for e in payload["episodes"]}) == 6
    for ep, rec in zip(payload["episodes"], records):
        assert (ep["step"], ep["pick"], ep["reward"], ep["sample_id"]) == (rec["step"], rec["pick"], rec["reward"],
                                                                           rec["sample_id"])
        assert len(ep["conversations"]) == len(rec["conversations"]) > 1
        assert ep["advantage"] == rec["conversations"][0]["advantage"]
        assert ep["length"] == sum(sum(c["loss_mask"]) for c in rec["conversations"])
        for conv, rc in zip(ep["conversations"], rec["conversations"]):
            prompt, *rest = conv["spans"]
            assert prompt == {"kind": "prompt", "text": rc["text"]["prompt"]}
            assert [s["kind"] for s in rest] == ["gen"]  # memagent: the response is all generated
            gen = rest[0]
            assert "".join(gen["tokens"]) == rc["text"]["response"]
            mask = rc["loss_mask"]
            assert gen["lp"] == [round(v, 4) for v, m in zip(rc["logprobs"], mask) if m]
            assert gen["tlp"] == [round(v, 4) for v, m in zip(rc["trainer_logprobs"], mask) if m]
            gaps = [abs(a - b) for a, b, m in zip(rc["logprobs"], rc["trainer_logprobs"], mask) if m]
            assert conv["max_mismatch"] == pytest.approx(max(gaps), abs=1e-4)


def test_without_the_tokenizer_the_text_fields_are_shown(run_dir):
    warnings = []
    payload = load_payload(run_dir, tokenizer="/no/such/tokenizer", warn=warnings.append)
    assert not payload["per_token"] and any("not loaded" in w for w in warnings)
    rec = _records(run_dir)[0]
    spans = payload["episodes"][0]["conversations"][0]["spans"]
    assert spans == [{"kind": "prompt", "text": rec["conversations"][0]["text"]["prompt"]},
                     {"kind": "gen", "text": rec["conversations"][0]["text"]["response"]}]


def test_token_strings_read_as_the_text_and_keep_multibyte_characters_whole():
    tok = load_tokenizer("tiny")
    text = "naïve 日本語 — ok\n  two"
    ids = tok.encode(text, add_special_tokens=False)
    pieces = token_strings(tok, ids)
    assert len(pieces) == len(ids) and "".join(pieces) == text
    assert "\ufffd" not in "".join(pieces) and "日" in pieces


def test_tool_eval_folder_gives_messages_breakdown_and_results(tool_eval_dir):
    payload = load_payload(tool_eval_dir)
    files = sorted((tool_eval_dir / "episodes").rglob("*.json"))
    assert payload["kind"] == "eval" and len(payload["episodes"]) == len(files) == 17
    assert payload["results"]["trials"] == 2 and "per_task" not in payload["results"]
    tools = next(e for e in payload["episodes"] if e["sample_id"] == "zz tools|1")
    assert tools["messages"] == TOOL_MESSAGES and tools["breakdown"] == {"DB": 1.0, "ACTION": 0.5}
    assert tools["reward"] == 0.5 and tools["length"] == 40 and tools["conversations"] == []
    plain = payload["episodes"][0]
    assert plain["messages"][-1]["content"] == "Nothing to change here." and plain["transcript"] is None
    assert plain["trial"] == 0 and "DB" in plain["breakdown"]


def test_long_context_eval_records_get_their_conversations_from_the_transcript(tmp_path):
    tok = load_tokenizer("tiny")
    convs = [Conversation.from_prompt_response(tok.encode(p), tok.encode(r), meta={"kind": k})
             for p, r, k in [("read chunk one\n\nok", "mem one", "memory"), ("question?", "\\boxed{b}", "final")]]
    traj = Trajectory(convs, 1.0, "3", "3", info={"question": "q?", "answers": ["b"], "answer": "b"})
    (tmp_path / "episodes" / "50").mkdir(parents=True)
    (tmp_path / "transcripts" / "50").mkdir(parents=True)
    record = {"docs": 50, "sample_id": "3", "reward": 1.0, "metrics": {"em": 1.0}, "info": traj.info,
              "conversations": [{"prompt_tokens": c.prompt_length, "response_tokens": c.num_generated, **c.meta}
                                for c in convs], "repeat": 0}
    (tmp_path / "episodes" / "50" / "3.json").write_text(json.dumps(record))
    text = render_transcript(traj, tok, "sample 3 (50 docs)")
    (tmp_path / "transcripts" / "50" / "3.txt").write_text(text)
    parts = transcript_conversations(text)
    assert [p["response"] for p in parts] == ["mem one", "\\boxed{b}"]
    assert parts[0]["prompt"] == "read chunk one\n\nok"
    ep = load_payload(tmp_path)["episodes"][0]
    assert ep["id"] == "50/3" and ep["step"] == 50 and ep["length"] == convs[0].num_generated + convs[1].num_generated
    assert [c["meta"] for c in ep["conversations"]] == [{"kind": "memory"}, {"kind": "final"}]
    assert ep["conversations"][1]["spans"][1] == {"kind": "gen", "text": "\\boxed{b}"}
    assert ep["summary"] == {"question": "q?", "answers": ["b"], "answer": "b"}


def test_a_folder_that_is_neither_is_refused(tmp_path):
    with pytest.raises(ValueError, match="neither a training run"):
        load_payload(tmp_path)
    with pytest.raises(FileNotFoundError):
        load_payload(tmp_path / "missing")
    for domain in ("retail", "airline"):  # memrl eval --domain retail,airline: one eval folder per domain
        (tmp_path / domain / "episodes").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"holds 2 eval or run folder\(s\) .*: view one, e\.g\. "
                                         r"memrl view .*airline \(also retail\)"):
        load_payload(tmp_path)


def test_multi_turn_conversations_split_into_generated_and_context_spans():
    tok = load_tokenizer("tiny")
    enc = lambda t: tok.encode(t, add_special_tokens=False)  # noqa: E731
    conv = Conversation()
    conv.append(enc("system and user"), generated=False)
    conv.append(enc("call tool"), generated=True, logprobs=[-0.5] * len(enc("call tool")))
    conv.append(enc("tool result"), generated=False)
    conv.append(enc("done"), generated=True, logprobs=[-1.0] * len(enc("done")))
    spans = conversation_spans({**conv.to_dict(), "trainer_logprobs": [v - 0.25 for v in conv.logprobs]}, tok)
    assert [s["kind"] for s in spans] == ["prompt", "gen", "ctx", "gen"]
    assert spans[0]["text"] == "system and user" and spans[2]["text"] == "tool result"
    assert "".join(spans[1]["tokens"]) == "call tool" and "".join(spans[3]["tokens"]) == "done"
    assert spans[3]["lp"] == [-1.0] * len(enc("done")) and spans[3]["tlp"] == [-1.25] * len(enc("done"))


def test_steps_and_last_pick_rollout_files(run_dir, tmp_path):
    keep = parse_steps("1, 10-20,100-")
    assert [n for n in (0, 1, 2, 10, 20, 21, 99, 100, 10**6) if keep(n)] == [1, 10, 20, 100, 10**6]
    for bad in ("x", "5-2", "1-2-3", ""):
        with pytest.raises(ValueError, match="--steps"):
            parse_steps(bad)
    assert [p.name for p in rollout_files(run_dir, "2")[0]] == ["step_000002.jsonl"]
    assert rollout_files(run_dir, last=1)[0] == rollout_files(run_dir, "2-")[0]
    assert rollout_files(run_dir)[1] == [1, 2]
    payload = load_payload(run_dir, steps="1")
    assert {e["step"] for e in payload["episodes"]} == {1}
    assert (payload["shown_steps"], payload["saved_steps"]) == (1, 2)
    (tmp_path / "episodes").mkdir()
    with pytest.raises(ValueError, match="eval folder"):
        load_payload(tmp_path, last=2)


def test_more_panels_draw_every_other_numeric_key_once_grouped_by_prefix():
    rows = [{"step": 1, "reward": 0.5, "chunks": 3.0, "rollout_corr/kl": 1e-9, "time/rollout": 2.0,
             "note": "text", "flag": True, "eval/accuracy": 0.1},
            {"step": 2, "reward": 0.7, "model_calls": 4, "rollout_corr/ppl": 379.0, "my/thing": None,
             "chunks": 2.0, "extra/z": 1.0, "extra/a": 2.0}]
    # fixed panels' keys (reward, time/rollout, eval/accuracy), step, text, booleans and nulls are not repeated
    assert more_panels(rows) == [("chunks", ["chunks"]), ("model_calls", ["model_calls"]),
                                 ("extra/a", ["extra/a"]), ("extra/z", ["extra/z"]),
                                 ("rollout_corr/kl", ["rollout_corr/kl"]), ("rollout_corr/ppl", ["rollout_corr/ppl"])]
    assert more_panels([]) == []
    many = [{"step": 1, **{f"tool/{i:04d}": 1.0 for i in range(MORE_LIMIT + 5)}}]
    assert len(more_panels(many)) == MORE_LIMIT


def test_run_payload_offers_the_workflows_own_metrics_as_more_curves(run_dir):
    payload = load_payload(run_dir)
    more = [k for _, [k] in payload["more_panels"]]
    # MemAgent's own metrics (ep.metric), the trainer's other numbers and the rollout corrections' diagnostics
    assert {"answered", "f1", "empty_memory", "pg_loss", "rollout_corr/kl"} <= set(more)
    assert not {"reward", "kl", "time/rollout", "step"} & set(more) and len(more) == len(set(more))
    assert load_payload(run_dir)["more_panels"] == payload["more_panels"]


def test_a_tokenizer_asked_for_by_name_that_does_not_load_is_an_error(run_dir, tmp_path):
    from typer.testing import CliRunner

    from memrl.cli.main import app

    page = tmp_path / "page.html"
    r = CliRunner().invoke(app, ["view", str(run_dir), "--tokenizer", "/no/such/tokenizer", "--out", str(page)])
    assert r.exit_code == 2 and not page.exists()
    assert r.output.strip().splitlines() == ["error: --tokenizer /no/such/tokenizer: no such folder (a model is a "
                                             "local folder, a hub id such as Qwen/Qwen2.5-0.5B-Instruct, or an "
                                             "alias (tiny, smollm2-135m-instruct))"]
    r = CliRunner().invoke(app, ["view", str(run_dir), "--tokenizer", "tiny", "--out", str(page)])
    assert r.exit_code == 0 and page.is_file(), r.output
    r = CliRunner().invoke(app, ["view", str(run_dir), "--tokenizer", "tiny", "--out", str(page)])
    assert r.exit_code == 0, r.output  # its own page: replaced
    notes = tmp_path / "notes.html"
    notes.write_text("<title>my notes</title>")
    r = CliRunner().invoke(app, ["view", str(run_dir), "--tokenizer", "tiny", "--out", str(notes)])
    assert r.exit_code == 2 and "exists and memrl did not write it" in r.output
    assert notes.read_text() == "<title>my notes</title>"


def test_a_tokenizer_a_folder_names_comes_only_from_the_local_cache(monkeypatch) -> None:
    """A hub id in a viewed folder's config is not downloaded (the user named no network), only looked up."""
    import transformers

    from memrl.view import loader

    asked: list[dict] = []
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained",
                        lambda path, **kw: asked.append(kw) or (_ for _ in ()).throw(OSError("not cached")))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    warnings: list[str] = []
    assert loader.get_tokenizer("some-org/not-cached-model-xyz", warnings.append) is None
    assert asked == [{"local_files_only": True}] and "not loaded" in warnings[0]


def test_a_run_whose_episodes_all_failed_points_at_their_tracebacks(run_dir, tmp_path):
    """No rollouts to show but tracebacks in failures/: the page is written and one line says where they are."""
    import shutil

    from typer.testing import CliRunner

    from memrl.cli.main import app

    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    shutil.rmtree(run / "rollouts")
    (run / "failures").mkdir()
    for k in range(2):
        (run / "failures" / f"step000001-sample{k}-0.txt").write_text("Traceback ...\nKeyError: 'question'\n")
    page = tmp_path / "page.html"
    r = CliRunner().invoke(app, ["view", str(run), "--out", str(page)])
    assert r.exit_code == 0 and page.is_file(), r.output
    assert f"no saved episode to show; 2 failed episodes left a traceback in {run / 'failures'}" in r.output
    r = CliRunner().invoke(app, ["view", str(run_dir), "--out", str(page)])
    assert "traceback" not in r.output  # a run with episodes: nothing more said
    for k in range(3):  # a tool eval's layout: failures/<task>/<trial>.json, each trial counted
        (run / "failures" / "task_7").mkdir(exist_ok=True)
        (run / "failures" / "task_7" / f"{k}.json").write_text("{}")
    r = CliRunner().invoke(app, ["view", str(run), "--out", str(page)])
    assert "5 failed episodes left a traceback" in r.output
