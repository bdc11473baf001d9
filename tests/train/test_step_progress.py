"""A slow step is not silent: the tracker hears what the rollout and the update have done so far."""

from __future__ import annotations

import io
import re
import time

from rich.console import Console

from memrl.models.resolve import load_tokenizer
from memrl.train.tracking import Tracker
from memrl.train.trainer import Trainer
from tests.train.helpers import coin_engine, config, write_task


def _console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=400), buf


def test_in_a_log_a_long_step_prints_what_it_is_doing_at_most_every_heartbeat(tmp_path, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("memrl.train.tracking.time.monotonic", lambda: clock[0])
    console, buf = _console()
    tracker = Tracker(tmp_path, 0, console=console, total_steps=3, heartbeat_s=60)
    tracker.phase("rollout: 1/4 episodes")  # 0 s into the step: nothing yet
    clock[0] += 61
    tracker.phase("rollout: 2/4 episodes")  # 61 s: one line
    clock[0] += 30
    tracker.phase("rollout: 3/4 episodes")  # 30 s after that line: nothing
    clock[0] += 31
    tracker.phase("update: mini-batch 1/1, micro-batch 1/2")
    tracker.log(1, {"reward": 0.5})  # a step line resets the clock
    clock[0] += 10
    tracker.phase("rollout: 1/4 episodes")
    lines = buf.getvalue().splitlines()
    assert lines == ["  ... rollout: 2/4 episodes (1m01s since the last step line)",
                     "  ... update: mini-batch 1/1, micro-batch 1/2 (2m02s since the last step line)",
                     lines[2]]
    assert lines[2].startswith("step 1/3") and "reward 0.500" in lines[2]


def test_on_a_terminal_the_phase_goes_to_the_live_bar_not_to_lines(tmp_path):
    buf = io.StringIO()
    console = Console(file=buf, width=200, force_terminal=True)
    tracker = Tracker(tmp_path, 0, console=console, total_steps=2, heartbeat_s=0)
    tracker.phase("rollout: 3/8 episodes")
    assert tracker._progress is not None
    assert tracker._progress.tasks[0].fields["phase"] == "rollout: 3/8 episodes"
    tracker.log(1, {"reward": 1.0})
    assert tracker._progress.tasks[0].fields["phase"] == ""
    tracker.close()
    assert "... rollout" not in buf.getvalue()


def test_training_reports_rollout_calls_and_update_micro_batches(tmp_path):
    held = write_task(tmp_path / "held.jsonl", n=3)
    cfg = config(tmp_path, trainer__total_steps=1, trainer__mini_batches=2, data__eval_file=str(held))
    cfg.trainer.eval.every = 1
    console, buf = _console()
    trainer = Trainer(cfg, engine=coin_engine(load_tokenizer("tiny")), tracker_console=console)
    trainer.tracker.heartbeat_s = 0  # every report becomes a line
    trainer.run()
    said = [line.split(" (")[0].removeprefix("  ... ") for line in buf.getvalue().splitlines()
            if line.startswith("  ... ")]
    rollout = [s for s in said if s.startswith("rollout: ")]
    counts = [tuple(int(x.replace(",", "")) for x in re.findall(r"\d[\d,]*", s)) for s in rollout]
    # (episodes done, of, calls, tokens): 2 prompts x n=4 episodes; calls and tokens only grow
    assert counts[-1][:2] == (8, 8) and all(c[1] == 8 for c in counts)
    assert [c[2] for c in counts] == sorted(c[2] for c in counts) and counts[-1][2] >= 8 * 2
    assert any(s.startswith("log-probs before the update: micro-batch 1/") for s in said)
    evals = [s for s in said if s.startswith("eval: ")]  # before step 1 and after it: 3 questions, 1 episode each
    assert [e.split(",")[0] for e in evals if e.startswith("eval: 3/3")] == ["eval: 3/3 episodes"] * 2
    update = [s for s in said if s.startswith("update: ")]
    assert update[0].startswith("update: mini-batch 1/2, micro-batch 1/")
    assert any(s.startswith("update: mini-batch 2/2, micro-batch ") for s in update)


def test_the_run_says_what_it_trains_before_the_first_step(tmp_path):
    cfg = config(tmp_path, trainer__total_steps=1, lora__enabled=True, lora__r=4)
    console, buf = _console()
    trainer = Trainer(cfg, engine=coin_engine(load_tokenizer("tiny")), tracker_console=console)
    first = buf.getvalue().splitlines()[0]
    trained = sum(p.numel() for p in trainer.policy.parameters() if p.requires_grad)
    assert first == (f"memrl train: tiny (0.1M parameters, LoRA r=4: {trained:,} trained) on cpu; workflow memagent, "
                     f"12 training samples; engine hf; 1 step x 2 prompts x 4 episodes; run folder {tmp_path / 'run'}")


def test_an_asynchronous_step_reports_while_it_waits_for_groups(tmp_path, monkeypatch):
    import memrl.train.async_rollout as async_rollout
    from memrl.testing import ScriptedEngine

    monkeypatch.setattr(async_rollout, "WAIT_REPORT_S", 0.01)
    tok = load_tokenizer("tiny")
    coin = coin_engine(tok)

    def slow(prompt, params):  # each model call takes a while: the trainer waits for the first groups
        time.sleep(0.02)
        return coin.reply(prompt, params)

    cfg = config(tmp_path, trainer__total_steps=1, trainer__mode="async", trainer__max_staleness=1)
    console, buf = _console()
    trainer = Trainer(cfg, engine=ScriptedEngine(slow), tracker_console=console)
    trainer.tracker.heartbeat_s = 0
    trainer.run()
    waits = [line for line in buf.getvalue().splitlines() if line.startswith("  ... waiting for rollouts: ")]
    assert waits and all(re.match(r"  \.\.\. waiting for rollouts: [01]/2 groups complete \(", w) for w in waits)


def test_a_resume_past_steps_missing_from_metrics_says_so(tmp_path):
    import json

    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward": 0.5}) + "\n" for s in (1, 3, 4)))
    console, buf = _console()
    Tracker(tmp_path, 3, console=console).close()
    assert "has no row for step(s) 2 of the 3 the checkpoint holds" in buf.getvalue()
    assert [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 3]
    console, buf = _console()
    Tracker(tmp_path, 0, console=console).close()  # a fresh start misses nothing
    assert "no row" not in buf.getvalue()
