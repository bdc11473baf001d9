"""One self-contained HTML page: the payload as JSON in a data tag, the viewer's CSS and JS inlined.

Episode text is never written into the HTML: it travels inside the JSON and the script builds
DOM nodes with ``textContent``. Every ``<`` of the JSON is written as ``\\u003c`` so no text (a
``</script>`` in a model's answer, say) can end the data tag early; ``JSON.parse`` reads it back.
"""

from __future__ import annotations

import html
import json
import unicodedata
from importlib import resources
from typing import Any

DATA_ID = "memrl-data"
# The viewer's scripts in load order (one scope: see viewer_script).
SCRIPTS = ("util.js", "charts.js", "list.js", "episode.js", "group.js", "view.js")
# Nothing is loaded from anywhere: the page's own inline script and style, images as data: URIs,
# and fetches to the server that sent it. Even text that got past the escaping could not call out.
CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'")
# Characters the viewer shows escaped besides the format/control/separator categories (as util.js).
_FILLERS = "\u115f\u1160\u3164\uffa0"


def static_text(name: str) -> str:
    """A file of ``memrl/view/static`` (shipped as package data)."""
    return resources.files("memrl.view").joinpath("static", name).read_text(encoding="utf-8")


def embed_json(payload: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">``."""
    text = json.dumps(payload, ensure_ascii=False, allow_nan=False, default=str)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def json_safe(value: Any) -> Any:
    """NaN and infinities (a diverged run logs them, a reward plug-in may return them) as null:
    JSON has no spelling for them, and the viewer shows null as "–"."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


def viewer_script() -> str:
    """The viewer's scripts as one, in one scope (each file uses the helpers of those before it)."""
    return "(function () {\n\"use strict\";\n" + "\n".join(static_text(n) for n in SCRIPTS) + "\n})();"


def visible_title(text: str) -> str:
    """The tab title with invisible and direction-changing characters written as ``[U+202E]``."""
    def hidden(ch: str) -> bool:
        return ch in _FILLERS or (unicodedata.category(ch) in ("Cf", "Cc", "Cs", "Zl", "Zp") and ch not in "\t\n\r")

    return "".join(f"[U+{ord(ch):04X}]" if hidden(ch) else ch for ch in text)


def render_page(payload: dict[str, Any]) -> str:
    """The whole page as a string; it needs no network and no other file."""
    css, js = static_text("view.css"), viewer_script()
    for name, text, tag in (("view.css", css, "</style"), ("the viewer's scripts", js, "</script")):
        if tag in text.lower():  # a guard for whoever edits the assets
            raise ValueError(f"{name} must not contain {tag}")
    title = html.escape(visible_title(f"memrl view · {payload.get('title', '')}"))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>{title}</title>\n<style>\n{css}\n</style>\n</head>\n<body>\n"
        "<noscript>This page needs JavaScript to show the run.</noscript>\n"
        "<div id=\"app\"></div>\n"
        f"<script type=\"application/json\" id=\"{DATA_ID}\">{embed_json(json_safe(payload))}</script>\n"
        f"<script>\n{js}\n</script>\n</body>\n</html>\n"
    )
