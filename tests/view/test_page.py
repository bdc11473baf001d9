"""The HTML page, the local server and the CLI: data stays data, whatever the episodes say."""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request
from contextlib import contextmanager
from urllib.parse import quote

from typer.testing import CliRunner

from memrl.cli.main import app
from memrl.view.loader import load_payload
from memrl.view.page import DATA_ID, embed_json, render_page
from memrl.view.server import make_server

EVIL = "</script><img src=x onerror=alert(1)><!-- <script>alert(2)</script>"


def evil_payload() -> dict:
    """An eval-shaped payload whose every text field tries to break out of the data tag."""
    conv = {"index": 0, "meta": {"kind": EVIL}, "tokens": 3, "generated": 2,
            "spans": [{"kind": "prompt", "text": EVIL}, {"kind": "gen", "tokens": [EVIL, "</SCRIPT>"],
                                                          "lp": [-0.1, -2.0], "tlp": [-0.2, -1.0]}]}
    episode = {"id": "e1", "step": 1, "pick": "best", "sample_id": EVIL, "group_id": "g", "reward": 1.0,
               "advantage": 0.5, "length": 2, "metrics": {"em": 1.0}, "breakdown": {EVIL: 1.0},
               "summary": {"answer": EVIL}, "conversations": [conv],
               "messages": [{"role": "assistant", "content": EVIL,
                             "tool_calls": [{"name": EVIL, "arguments": {"q": EVIL}}]}]}
    return {"kind": "run", "title": EVIL, "source": "/x", "tokenizer": "tiny", "per_token": True,
            "metrics": [{"step": 1, "reward": float("nan")}], "panels": [["reward", ["reward"]]],
            "results": None, "episodes": [episode]}


def data_of(page: str) -> dict:
    m = re.search(rf'<script type="application/json" id="{DATA_ID}">(.*?)</script>', page, re.S)
    assert m is not None
    return json.loads(m.group(1))


def test_episode_text_cannot_leave_the_data_tag():
    payload = evil_payload()
    page = render_page(payload)
    assert "<img" not in page and "alert(1)" in page  # present, but only as JSON text
    assert page.count("</script>") == 2 and page.lower().count("<script") == 2  # the data tag and the viewer
    back = data_of(page)
    assert back["episodes"][0]["conversations"][0]["spans"][1]["tokens"] == [EVIL, "</SCRIPT>"]
    assert back["title"] == EVIL and back["metrics"][0]["reward"] is None  # NaN is not JSON
    assert "<title>memrl view · &lt;/script&gt;" in page
    assert json.loads(embed_json({"a": "\u2028<"})) == {"a": "\u2028<"}


@contextmanager
def serving(folder):
    """A view server on a free port in a thread; yields its base URL."""
    server = make_server(folder, 0)
    host, port = server.server_address[:2]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.shutdown()
        server.server_close()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_server_sends_the_list_then_each_episode_on_demand(run_dir):
    full = load_payload(run_dir)["episodes"]
    with serving(run_dir) as base:
        assert base.startswith("http://127.0.0.1:")
        code, page = get(base + "/")
        listed = data_of(page)["episodes"]
        assert code == 200 and [e["id"] for e in listed] == [e["id"] for e in full]
        assert all(e["lazy"] and "conversations" not in e for e in listed)
        assert all(e["reward"] == f["reward"] and e["length"] == f["length"] for e, f in zip(listed, full))
        code, body = get(f"{base}/episode?id={quote(full[4]['id'])}")
        assert code == 200 and json.loads(body) == full[4]
        assert get(f"{base}/episode?id=9-0")[0] == 404 and get(f"{base}/episode?id=1-99")[0] == 404
        assert get(base + "/other")[0] == 404


def test_server_ids_stay_inside_the_eval_folder(tool_eval_dir):
    (tool_eval_dir / "secret.json").write_text("{}")
    full = {e["id"]: e for e in load_payload(tool_eval_dir)["episodes"]}
    with serving(tool_eval_dir) as base:
        ep_id = next(i for i in full if i.startswith("zz_tools"))
        code, body = get(f"{base}/episode?id={quote(ep_id)}")
        assert code == 200 and json.loads(body) == full[ep_id]
        for bad in ("../secret", "../../../etc/passwd", "/etc/passwd"):
            assert get(f"{base}/episode?id={quote(bad, safe='')}")[0] == 404


def test_cli_writes_one_self_contained_file(run_dir, tmp_path):
    out = tmp_path / "view.html"
    r = CliRunner().invoke(app, ["view", str(run_dir), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert f"wrote {out} (6 episodes, " in r.output
    page = out.read_text()
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", page)  # nothing fetched from elsewhere
    assert len(data_of(page)["episodes"]) == 6
    bad = CliRunner().invoke(app, ["view", str(tmp_path / "nothing"), "--out", str(out)])
    assert bad.exit_code == 2
    r = CliRunner().invoke(app, ["view", str(run_dir), "--out", str(out), "--last", "1"])
    assert r.exit_code == 0 and {e["step"] for e in data_of(out.read_text())["episodes"]} == {2}
    bad = CliRunner().invoke(app, ["view", str(run_dir), "--out", str(out), "--steps", "3-1"])
    assert bad.exit_code == 2 and "ends before it starts" in bad.output
    metrics = run_dir / "metrics.jsonl"
    before = metrics.read_bytes()
    for target in (metrics, run_dir / "curves.png"):  # an input, or any file that is not a page
        bad = CliRunner().invoke(app, ["view", str(run_dir), "--out", str(target)])
        assert bad.exit_code == 2 and f"--out {target}: the page is one HTML file; name a .html file" in bad.output
    bad = CliRunner().invoke(app, ["plot", str(run_dir), "--out", str(metrics)])
    assert bad.exit_code == 2 and f"--out {metrics}: the plot is a PNG image; name a .png file" in bad.output
    assert metrics.read_bytes() == before
