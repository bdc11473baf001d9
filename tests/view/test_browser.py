"""The page in a real headless Chromium: what its script builds, read back from the dumped DOM.

Skipped where Chromium is not installed (``apt-get install -y chromium``).
"""

from __future__ import annotations

import json
from urllib.parse import quote

from memrl.view.loader import CURVE_PANELS, load_payload
from memrl.view.page import render_page
from tests.view.conftest import TOOL_MESSAGES, Dom, browser
from tests.view.test_page import EVIL, evil_payload, serving


def write_page(payload: dict, path) -> object:
    path.write_text(render_page(payload), encoding="utf-8")
    return path


def test_run_page_lists_every_episode_and_shows_one_with_its_conversations(run_dir, tmp_path):
    payload = load_payload(run_dir)
    page = write_page(payload, tmp_path / "run.html")
    records = [json.loads(line) for f in sorted((run_dir / "rollouts").glob("*.jsonl"))
               for line in f.read_text().splitlines()]
    target = payload["episodes"][4]
    dom = Dom(browser(page, "--dump-dom", fragment=f"#episode={target['id']}"))
    assert [a["data-id"] for a in dom.having("ep-row", "a")] == [e["id"] for e in payload["episodes"]]
    shown = dom.having("episode", "section")
    assert [s["data-id"] for s in shown] == [target["id"]]
    assert len(dom.having("conv")) == len(records[4]["conversations"]) == len(target["conversations"])
    assert len(dom.having("active")) == 1 and dom.having("active")[0]["data-id"] == target["id"]
    # one token element per generated token, each with its log-probs on hover
    toks = dom.having("tok")
    assert len(toks) == sum(sum(c["loss_mask"]) for c in records[4]["conversations"])
    assert all("engine log-prob" in t["title"] and "trainer" in t["title"] for t in toks)
    assert all("background-color" in t.get("style", "") for t in toks)  # the heat map is on by default
    # the curves: one path per plotted metric, the fixed panels' and, folded below them, every other key's
    rows = payload["metrics"]
    plotted = [k for _, keys in CURVE_PANELS for k in keys if any(k in r for r in rows)]
    more = [k for _, [k] in payload["more_panels"]]
    assert sorted(p["data-key"] for p in dom.having("series", "path")) == sorted(plotted + more)
    assert len(plotted) >= 6 and "f1" in more and "rollout_corr/kl" in more
    folded = dom.having("more-curves", "details")
    assert len(folded) == 1 and f"{len(more)} more curves" in "".join(dom.text)


def test_tool_eval_page_shows_messages_and_tool_calls(tool_eval_dir, tmp_path):
    payload = load_payload(tool_eval_dir)
    page = write_page(payload, tmp_path / "tools.html")
    target = next(e for e in payload["episodes"] if e["sample_id"] == "zz tools|1")
    dom = Dom(browser(page, "--dump-dom", fragment="#episode=" + quote(target["id"], safe="")))
    assert len(dom.having("ep-row", "a")) == len(payload["episodes"]) == 17
    assert len(dom.having("msg")) == len(TOOL_MESSAGES)
    assert len(dom.having("tool-call")) == 2 and len(dom.having("error", "div")) == 1
    text = "".join(dom.text)
    assert "get_member_details" in text and "borrow_book" in text and "ACTION" in text
    assert not dom.having("series", "path")  # an eval folder has no curves


def test_hostile_episode_text_is_shown_as_text(tmp_path):
    page = write_page(evil_payload(), tmp_path / "evil.html")
    out = browser(page, "--dump-dom", fragment="#episode=e1")
    dom = Dom(out)
    assert not [t for t, _ in dom.tags if t == "img"]
    assert sum(1 for t, _ in dom.tags if t == "script") == 2  # the page's own two, nothing injected
    # shown as text in the title, heading, prompt, token, breakdown, summary, message and tool call
    assert "".join(dom.text).count(EVIL) >= 10 and dom.having("conv")


def test_screenshot(run_dir, tmp_path):
    page = write_page(load_payload(run_dir), tmp_path / "run.html")
    shot = tmp_path / "run.png"
    browser(page, f"--screenshot={shot}", "--window-size=1280,2000", fragment="#episode=2-0")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_served_page_fetches_the_opened_episode(run_dir):
    payload = load_payload(run_dir)
    target = payload["episodes"][2]
    with serving(run_dir) as base:
        dom = Dom(browser(None, "--dump-dom", url=f"{base}/#episode={target['id']}"))
    assert len(dom.having("ep-row", "a")) == len(payload["episodes"])
    assert [s["data-id"] for s in dom.having("episode", "section")] == [target["id"]]
    assert len(dom.having("conv")) == len(target["conversations"]) and dom.having("tok")


def test_an_agent_programs_own_messages_are_shown_with_its_conversation(run_dir, tmp_path):
    payload = load_payload(run_dir)
    target = payload["episodes"][0]
    sent = [{"role": "system", "content": "You keep notes."}, {"role": "user", "content": "Read chunk one."},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function",
                             "function": {"name": "save_note", "arguments": "{\"text\": \"x\"}"}}]}]
    target["conversations"][0]["meta"] = {"finish": "stop", "messages": sent, "tools": [{"type": "function"}]}
    page = write_page(payload, tmp_path / "agent.html")
    dom = Dom(browser(page, "--dump-dom", fragment=f"#episode={target['id']}"))
    assert len(dom.having("sent", "details")) == 1
    assert len(dom.having("msg")) == 3 and len(dom.having("tool-call")) == 1
    text = "".join(dom.text)
    assert "messages as the program sent them (3)" in text and "1 tools" in text and "save_note" in text
    assert "[object Object]" not in text  # nested meta stays out of the conversation's header


def test_a_run_of_32k_steps_draws_its_curves_and_lists_its_episodes(run_dir, tmp_path):
    """Math.min(...points) overflowed the stack past ~124k points (31k steps x 4 timing keys): the page showed
    only its header, no curves and no episode list."""
    payload = load_payload(run_dir)
    payload["metrics"] = [{"step": s, "reward": (s % 7) / 7, "time/rollout": 1.0 + s % 3, "time/logprob": 0.2,
                           "time/update": 0.5, "time/sync": 0.01} for s in range(1, 32_001)]
    dom = Dom(browser(write_page(payload, tmp_path / "long.html"), "--dump-dom"))
    keys = {p["data-key"] for p in dom.having("series", "path")}
    assert {"reward", "time/rollout", "time/sync"} <= keys
    assert [a["data-id"] for a in dom.having("ep-row", "a")] == [e["id"] for e in payload["episodes"]]
