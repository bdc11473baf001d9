"""The viewer in headless Chromium: labels, picks, eval results, escapes, axes, groups, search, grader checks.

Skipped where Chromium is not installed (``apt-get install -y chromium``).
"""

from __future__ import annotations

import base64
import copy
import json
import re
from urllib.parse import quote

import pytest

from memrl.view.loader import load_payload
from memrl.view.page import render_page
from tests.view.conftest import Dom, browser
from tests.view.test_page import serving


def page_of(payload: dict, tmp_path, name: str = "page.html"):
    path = tmp_path / name
    path.write_text(render_page(payload), encoding="utf-8")
    return path


def texts(dom: Dom, cls: str) -> list[str]:
    """The text of each element of class ``cls`` (re-parsed: Dom keeps tags and text apart)."""
    out, depth, buf = [], 0, []

    class P(Dom):
        def handle_starttag(self, tag, attrs):
            nonlocal depth
            if depth:
                depth += 1
            elif cls in (dict(attrs).get("class") or "").split():
                depth, buf[:] = 1, []

        def handle_endtag(self, tag):
            nonlocal depth
            if depth:
                depth -= 1
                if not depth:
                    out.append("".join(buf))

        def handle_data(self, data):
            if depth:
                buf.append(data)

    P(dom.source)
    return out


class Page(Dom):
    def __init__(self, text: str) -> None:
        self.source = text
        super().__init__(text)


def show(path, fragment: str = "") -> Page:
    return Page(browser(path, "--dump-dom", fragment=fragment))


def test_sample_labels_show_when_the_episode_id_starts_with_the_sample_id(run_dir, tmp_path):
    payload = load_payload(run_dir)
    for e in payload["episodes"]:
        e["sample_id"] = str(e["step"])  # "1-0" starts with "1": the label used to vanish
    dom = show(page_of(payload, tmp_path))
    assert texts(dom, "ep-sample") == [f"sample {e['step']}" for e in payload["episodes"]]


def test_best_and_worst_are_shown_only_where_rewards_differ(run_dir, tmp_path):
    payload = load_payload(run_dir)
    step1 = [e for e in payload["episodes"] if e["step"] == 1]
    for e in step1:
        e["reward"] = 1.0
    step2 = [e for e in payload["episodes"] if e["step"] == 2]
    assert len({e["reward"] for e in step2}) > 1 and {e["pick"] for e in step1} >= {"best", "worst"}
    path = page_of(payload, tmp_path)
    dom = show(path, f"#episode={step1[0]['id']}")
    rows = texts(dom, "ep-row")
    assert len(rows) == len(payload["episodes"])
    for e, text in zip(payload["episodes"], rows):
        expect = e["pick"] if e["step"] == 2 or e["pick"] == "random" else ""
        assert (expect in text) if expect else not re.search(r"best|worst", text), (e["id"], text)
    head = texts(dom, "badges")[0]
    assert "best" not in head and "worst" not in head  # the opened step-1 episode says no pick either


def test_eval_results_are_formatted_with_the_per_size_table_and_the_plot(qa_eval_dir, tmp_path):
    payload = load_payload(qa_eval_dir)
    payload["results"]["by_docs"]["3"].update(context_tokens=8888.7, seconds_per_episode=0.00149)  # timing varies
    payload["results"]["seconds_per_episode"] = 0.123456
    dom = show(page_of(payload, tmp_path))
    cards = dict(zip(texts(dom, "k"), texts(dom, "v")))
    assert cards["repeats"] == "2" and cards["seconds per episode"] == "0.123"
    rows = [r for r in dom.tags if r[0] == "tr" and "data-docs" in r[1]]
    assert [r[1]["data-docs"] for r in rows] == ["3", "6"]
    table = re.search(r'<table class="sizes">(.*?)</table>', dom.source, re.S).group(1)
    cells = [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r'<tr data-docs="\d+">(.*?)</tr>', table)]
    heads = re.findall(r"<th>(.*?)</th>", table)
    assert dict(zip(heads, cells[0])) == {"docs": "3", "context tokens": "8,889", "finished": "4", "failed": "0",
                                          "sub-EM %": "50", "EM %": "50", "F1 %": "50", "pass@k %": "100",
                                          "answered %": "100", "conversations": "2", "s / episode": "0.001"}
    for value in [*cards.values(), *cells[0], *cells[1]]:
        assert not re.search(r"\d\.\d*0$|\d\.\d{4,}", value), value  # no "8888.700", no "0.123456"
    img = [a for t, a in dom.tags if t == "img"]
    png = (qa_eval_dir / "accuracy.png").read_bytes()
    assert len(img) == 1 and img[0]["src"] == "data:image/png;base64," + base64.b64encode(png).decode()


HIDDEN = "\u202e\u2066\u200b\u200d\ufeff\u00ad\U000e0041\u0007\u2028"


def test_invisible_and_bidi_characters_are_shown_escaped(run_dir, tmp_path):
    payload = load_payload(run_dir)
    payload["title"] = "run" + HIDDEN
    ep = payload["episodes"][0]
    spoof = "invoice\u202egnp.exe"
    ep["sample_id"] = spoof
    ep["summary"] = {"answer": spoof + HIDDEN}
    ep["conversations"][0]["spans"][0]["text"] = "prompt " + HIDDEN
    gen = next(s for s in ep["conversations"][-1]["spans"] if s["kind"] == "gen")
    gen["tokens"][0] = "\u202e" + gen["tokens"][0]
    ep["messages"] = [{"role": "assistant", "content": spoof, "tool_calls": [{"name": "f\u200b", "arguments": {"a": spoof}}]}]
    out = browser(page_of(payload, tmp_path), "--dump-dom", fragment=f"#episode={ep['id']}")
    body = out.split("<body", 1)[1]
    data_tag = re.search(r'<script type="application/json".*?</script>', body, re.S).group(0)
    shown = body.replace(data_tag, "")
    for ch in HIDDEN.replace("\u2028", "") + "\u202e":
        assert ch not in shown, f"U+{ord(ch):04X} reached the page unescaped"
    dom = Page(out)
    escapes = texts(dom, "esc")
    assert "[U+202E RLO]" in escapes and "[U+200B ZWSP]" in escapes and "[U+E0041]" in escapes
    # HIDDEN sits in the heading, the summary and the prompt; the spoof in the list, the badge, the summary,
    # the message, the tool call's arguments and (its RLO) a token
    assert escapes.count("[U+2066 LRI]") == 3 and escapes.count("[U+202E RLO]") == 3 + 6
    assert "invoice[U+202E RLO]gnp.exe" in "".join(dom.text)
    assert "[U+202E" in re.search(r"<title>(.*?)</title>", out, re.S).group(1)
    assert all("\u202e" not in a.get("title", "") for _, a in dom.tags)  # tooltips escaped too


def significant_digits(label: str) -> int:
    mantissa = re.sub(r"e[+-]?\d+$|[KMBT]$", "", label.lstrip("-"))
    return len(mantissa.replace(".", "").replace(",", "").lstrip("0")) or 1


def test_axis_labels_are_short(run_dir, tmp_path):
    payload = load_payload(run_dir)
    payload["metrics"] = [{"step": s, "reward": 0.1234567 + s * 1e-7, "kl": s * 1.37e-6, "entropy": 5.94 + s * 3e-4,
                           "response_tokens": 1234567 + 98765 * s, "grad_norm": 0.3 * s,
                           "eval/accuracy": 100.0 / 3 * s} for s in range(1, 4)]
    dom = show(page_of(payload, tmp_path))
    charts = [re.findall(r'class="tick"[^>]*>([^<]*)<', c) for c in re.findall(r'<svg[^>]*class="chart".*?</svg>',
                                                                               dom.source, re.S)]
    labels = [[t for t in c if not t.startswith("step")] for c in charts]
    assert len(labels) == 6 and all(len(c) >= 2 for c in labels)
    for c in labels:
        assert all(significant_digits(t) <= 4 for t in c), c
        assert len(set(c)) == len(c), c  # and they tell the lines apart


def test_group_view_shows_every_saved_episode_of_a_prompt_with_reward_and_advantage(run_dir, tmp_path):
    payload = load_payload(run_dir)
    by_group: dict = {}
    for e in payload["episodes"]:
        by_group.setdefault((e["step"], e["group_id"]), []).append(e)
    (step, gid), members = max(by_group.items(), key=lambda kv: len(kv[1]))
    assert len(members) == 2
    key = quote(f"{step}|{gid}", safe="")
    dom = show(page_of(payload, tmp_path), f"#group={key}")
    cols = dom.having("group-col")
    assert [c["data-id"] for c in cols] == [e["id"] for e in members]
    heads = texts(dom, "col-head")
    for e, head in zip(members, heads):
        assert f"reward {e['reward']:g}" in head and f"advantage {round(e['advantage'], 3):g}" in head
    assert "2 episodes shown of 4 sampled" in texts(dom, "badges")[0]
    assert all(t.strip() for t in texts(dom, "col-text"))
    # from an episode, a link leads there
    dom = show(page_of(payload, tmp_path), f"#episode={members[0]['id']}")
    assert [a["href"] for a in dom.having("group-link", "a")] == [f"#group={key}"]


def test_eval_group_compares_the_repeats_of_a_question(qa_eval_dir, tmp_path):
    dom = show(page_of(load_payload(qa_eval_dir), tmp_path), "#group=" + quote("3|0", safe=""))
    assert [c["data-id"] for c in dom.having("group-col")] == ["3/0", "3/0@1"]
    assert texts(dom, "adv") == ["vs mean 0.5", "vs mean -0.5"]
    assert [t for t in texts(dom, "reward") if t.startswith("reward")][-2:] == ["reward 1", "reward 0"]


def test_search_in_text_filters_the_list_and_marks_the_matches(run_dir, tmp_path):
    payload = load_payload(run_dir)
    questions = [e["summary"]["question"] for e in payload["episodes"]]
    target = next(e for e, q in zip(payload["episodes"], questions) if questions.count(q) == 1)
    q = target["summary"]["question"].upper()  # any case
    dom = show(page_of(payload, tmp_path), f"#episode={target['id']}&q={quote(q)}")
    assert visible_rows(dom) == [target["id"]]
    marks = texts_of_tag(dom, "mark")
    assert marks and all(m.upper() == q for m in marks)  # in the summary and in each conversation's prompt
    assert len(marks) == 1 + len(target["conversations"])


def visible_rows(dom: Page) -> list[str]:
    out, hidden = [], False
    for tag, attrs in dom.tags:
        if tag == "li":
            hidden = "hidden" in attrs
        if tag == "a" and "ep-row" in attrs.get("class", ""):
            if not hidden:
                out.append(attrs["data-id"])
    return out


def texts_of_tag(dom: Page, name: str) -> list[str]:
    return re.findall(rf"<{name}>(.*?)</{name}>", dom.source, re.S)


def test_served_page_searches_on_the_server_and_loads_a_group(run_dir):
    payload = load_payload(run_dir)
    target = payload["episodes"][1]
    q = target["summary"]["answer"]
    with serving(run_dir) as base:
        dom = Page(browser(None, "--dump-dom", url=f"{base}/#episode={target['id']}&q=" + quote("boxed{" + q + "}")))
        expected = [e["id"] for e in payload["episodes"] if e["summary"]["answer"] == q]
        assert visible_rows(dom) == expected and len(expected) < len(payload["episodes"])
        assert texts_of_tag(dom, "mark")  # the opened episode, fetched, is marked too
        key = f"{target['step']}|{target['group_id']}"
        dom = Page(browser(None, "--dump-dom", url=f"{base}/#group=" + quote(key, safe="")))
    members = [e["id"] for e in payload["episodes"] if f"{e['step']}|{e['group_id']}" == key]
    assert [c["data-id"] for c in dom.having("group-col")] == members
    assert len(texts(dom, "col-text")) == len(members)  # fetched, not "loading…"


def test_tool_episodes_show_the_gold_actions_and_the_grader_checks(tool_eval_dir, tmp_path):
    payload = load_payload(tool_eval_dir)
    for e in payload["episodes"]:  # what the viewer re-checked agrees with the recorded scores
        g = e.get("grader")
        if g is None:
            continue
        if "DB" in e["breakdown"]:
            assert e["breakdown"]["DB"] == float(g["db_match"]), e["id"]
        if "ACTION" in e["breakdown"]:
            assert e["breakdown"]["ACTION"] == float(all(a["matched"] for a in g["actions"])), e["id"]
        if "COMMUNICATE" in e["breakdown"]:
            assert e["breakdown"]["COMMUNICATE"] == float(all(c["found"] for c in g["communicate"])), e["id"]
    assert sum(1 for e in payload["episodes"] if e.get("grader")) == 16
    dom = show(page_of(payload, tmp_path), "#episode=" + quote("checkout_5/0", safe=""))
    grader = texts(dom, "grader")[0]
    assert "checkout_book" in grader and '"member_id":"M010"' in grader and "✗ missing" in grader
    assert "database differs from the gold run" in grader
    dom = show(page_of(payload, tmp_path), "#episode=" + quote("checkout_blocked_1/0", safe=""))
    assert "database matches the gold run" in texts(dom, "grader")[0]


def test_nan_reward_shows_a_dash(run_dir, tmp_path):
    payload = copy.deepcopy(load_payload(run_dir))
    payload["episodes"][0]["reward"] = float("nan")
    dom = show(page_of(payload, tmp_path), f"#episode={payload['episodes'][0]['id']}")
    first = texts(dom, "ep-row")[0]
    assert first.endswith("–") and "reward –" in texts(dom, "badges")[0]


@pytest.mark.parametrize("q", ["", "x" * 201])
def test_search_endpoint_validates_the_query(run_dir, q):
    from tests.view.test_server import request

    with serving(run_dir) as base:
        code, body = request(base, "/search?q=" + quote(q), base.removeprefix("http://"))
    assert code == 400 and "1 to 200 characters" in body


def test_search_endpoint_finds_text_of_runs_and_evals(run_dir, tool_eval_dir):
    from tests.view.test_server import request

    with serving(run_dir) as base:
        code, body = request(base, "/search?q=" + quote("WHICH LETTER 6"), base.removeprefix("http://"))
    expect = [e["id"] for e in load_payload(run_dir)["episodes"] if e["summary"]["question"] == "Which letter 6?"]
    assert code == 200 and json.loads(body)["ids"] == expect and expect
    with serving(tool_eval_dir) as base:
        code, body = request(base, "/search?q=borrow_book", base.removeprefix("http://"))
    assert json.loads(body)["ids"] == [e["id"] for e in load_payload(tool_eval_dir)["episodes"]
                                       if e["sample_id"] == "zz tools|1"]


def test_a_ruler_episode_shows_its_ruler_score_at_its_length_in_its_own_group():
    """The viewer showed the workflow's boxed-answer reward (vt at 1K: 1, where RULER scores 0.4), 'docs 1' for
    every episode, and grouped sample 0 of every task and length as one question."""
    from memrl.view.episodes import eval_episode

    vt = eval_episode({"sample_id": "0", "task": "vt", "length": 1024, "docs": 1, "reward": 1.0, "ruler_score": 0.4,
                       "metrics": {}}, "vt_1024/0", None)
    niah = eval_episode({"sample_id": "0", "task": "niah_multivalue", "length": 1024, "docs": 1, "reward": 0.0,
                         "ruler_score": 1.0, "metrics": {}}, "niah_multivalue_1024/0", None)
    assert (vt["reward"], vt["step"], vt["metrics"]["workflow_reward"]) == (0.4, 1024, 1.0)
    assert niah["reward"] == 1.0 and vt["group_id"] != niah["group_id"]
    qa = eval_episode({"sample_id": "3", "docs": 50, "reward": 1.0, "metrics": {}}, "50/3", None)
    assert (qa["reward"], qa["step"], qa["group_id"]) == (1.0, 50, "3")


def test_a_value_logged_as_nan_breaks_the_curve_instead_of_being_bridged(run_dir, tmp_path):
    """NaN/inf reach the page as null (JSON has no spelling for them): the line stops there and starts again,
    its tooltip counts the gap; a key a row does not log (eval every N steps) is no gap."""
    payload = load_payload(run_dir)
    payload["metrics"] = [{"step": s, "reward": None if s in (3, 4) else 0.1 * s,
                           **({"eval/accuracy": 10.0 * s} if s % 2 else {})} for s in range(1, 7)]
    dom = show(page_of(payload, tmp_path))
    found = re.findall(r'<path d="([^"]*)" class="series"[^>]*data-key="([^"]*)"', dom.source)
    paths = {key: d for d, key in found}
    assert paths["reward"].count("M") == 2 and paths["reward"].count("L") == 2  # 1-2, then 5-6
    assert paths["eval/accuracy"].count("M") == 1 and paths["eval/accuracy"].count("L") == 2  # steps 1, 3, 5
    assert "reward: last 0.6 at step 6; 2 step(s) not finite (NaN/inf), left as gaps" in dom.source
    payload["metrics"] = [{"step": s, "reward": None if s == 3 else 0.1 * s} for s in (1, 2, 3)]
    dom = show(page_of(payload, tmp_path, "last.html"))
    assert "0.2, then NaN" in texts(dom, "last")  # the reward panel's caption: its last finite value, then NaN
    # a long run: dots only where no line reaches (step 50, between two NaN steps)
    payload["metrics"] = [{"step": s, "reward": None if s in (49, 51) else 0.01 * s} for s in range(1, 101)]
    dom = show(page_of(payload, tmp_path, "long.html"))
    assert re.findall(r'<title>reward = ([^<]*) \(step (\d+)\)</title>', dom.source) == [("0.5", "50")]


def test_a_curve_never_finite_says_so_where_its_panel_would_be(run_dir, tmp_path):
    """A reward that is NaN at every logged step has no point to draw: its panel says so (it vanished)."""
    payload = load_payload(run_dir)
    payload["metrics"] = [{"step": s, "reward": None} for s in (1, 2, 3)]
    dom = show(page_of(payload, tmp_path))
    assert texts(dom, "never-finite") == ["reward: NaN/inf at all 3 logged steps"]
    assert 'data-key="reward"' not in dom.source
