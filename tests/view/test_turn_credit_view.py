"""Per-turn credit in the viewer: each conversation's turn reward, advantage and anchor state (with how many of
the group's saved turns share it), an episode's per-turn advantages, and the group view's per-turn line."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from urllib.parse import quote

import pytest

from memrl import Trainer
from memrl.view.loader import load_episode, load_payload
from memrl.view.page import render_page
from tests.train.test_turn_credit_train import WORDS, Steps, _config
from tests.view.conftest import browser
from tests.view.test_viewer import Page, texts


@pytest.fixture(scope="module")
def gigpo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("view_gigpo")
    cfg = _config(tmp, "gigpo")
    cfg["trainer"]["total_steps"] = 1
    Trainer(cfg, workflow=Steps(), train=WORDS).run()
    return tmp / "run"


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "rollouts" / "step_000001.jsonl").read_text().splitlines()]


def test_conversations_carry_turn_reward_advantage_and_anchor_with_its_group_count(gigpo_run):
    records = _records(gigpo_run)
    want = Counter((r["group_id"], c["meta"]["state"]) for r in records for c in r["conversations"]
                   if c["meta"].get("state"))
    assert max(want.values()) > 1  # anchors repeat within a group (Steps' first turn always does)
    payload = load_payload(gigpo_run)
    assert len(payload["episodes"]) == len(records) == 8
    for ep, rec in zip(payload["episodes"], records):
        for c, raw in zip(ep["conversations"], rec["conversations"]):
            state = raw["meta"].get("state")
            assert c["state"] == state and c["reward"] == raw["reward"] and c["advantage"] == raw.get("advantage")
            assert c["anchor_shared"] == (want[(rec["group_id"], state)] if state else None)
        advs = [c.get("advantage") for c in rec["conversations"]]
        assert ep["advantages"] == (advs if len(set(a for a in advs if a is not None)) > 1 else None)
    assert any(e["advantages"] for e in payload["episodes"])  # gigpo gave some episode's turns different values
    # the served page's detail (one episode at a time) counts over the same step's file
    first = payload["episodes"][0]
    assert load_episode(gigpo_run, first["id"])["conversations"] == first["conversations"]
    lazy = load_payload(gigpo_run, lazy=True)["episodes"][0]
    assert lazy["advantages"] == first["advantages"] and "conversations" not in lazy


def test_the_page_shows_each_turns_reward_advantage_and_anchor(gigpo_run, tmp_path):
    payload = load_payload(gigpo_run)
    target = next(e for e in payload["episodes"] if e["advantages"])
    page = tmp_path / "gigpo.html"
    page.write_text(render_page(payload), encoding="utf-8")
    dom = Page(browser(page, "--dump-dom", fragment=f"#episode={target['id']}"))
    rows = dom.having("turn-row", "tr")
    assert len(rows) == len(target["conversations"]) == 3
    cells = [t.strip() for t in texts(dom, "turn-adv")]
    assert len(cells) == 3 and cells != [cells[0]] * 3  # each turn its own advantage
    anchors = texts(dom, "anchor")
    shared = [c for c in target["conversations"] if c["state"]]
    assert len(anchors) == len(shared) == 2
    for text, c in zip(anchors, shared):
        assert text.startswith("anchor " + c["state"][:8])
        assert (f"×{c['anchor_shared']}" in text) == (c["anchor_shared"] > 1)
    assert texts(dom, "turn-reward") == [f"turn reward {target['conversations'][1]['reward']:g}"]
    assert any(t.startswith("advantage per turn ") for t in texts(dom, "adv"))
    assert "state " not in " ".join(texts(dom, "muted"))  # the anchor is a pill, not repeated in the meta line
    # the group view lists every member's per-turn advantages
    key = quote(f"{target['step']}|{target['group_id']}", safe="")
    dom = Page(browser(page, "--dump-dom", fragment=f"#group={key}"))
    members = [e for e in payload["episodes"] if e["group_id"] == target["group_id"]]
    assert len(texts(dom, "col-turns")) == sum(1 for e in members if e["advantages"])
