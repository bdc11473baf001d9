"""Which log-prob a server returns: a start-up probe at two temperatures.

A vLLM server started without ``--logprobs-mode processed_logprobs`` reports log-probs of the
raw logits (before temperature), while memrl's trainer scores tokens under ``logits / T``; at any
temperature but 1 every correction built on the served numbers (behaviour log-probs, TIS, the
mismatch metric) is then wrong. The probe asks for the top alternatives of one token at
``T = 1`` and ``T = 1/2`` for the same prompt: under the temperature-scaled distribution the
log-prob *gap* between two tokens doubles at ``T = 1/2``; under raw log-probs it does not move.
Gaps, not values, so the answer does not depend on which token was sampled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

PROBE_PROMPT = (1, 2, 3, 4, 5, 6, 7, 8)
SCALED, RAW, UNKNOWN = "temperature-scaled", "raw", "unknown"


def _top(body: Mapping[str, Any]) -> dict[str, float]:
    """The first generated position's alternatives {token: log-prob} from a /completions answer."""
    choice = (body.get("choices") or [{}])[0]
    tops = (choice.get("logprobs") or {}).get("top_logprobs") or []
    first = tops[0] if tops else {}
    return {str(k): float(v) for k, v in first.items() if v is not None and v > -1e9}


def classify(at_one: Mapping[str, float], at_half: Mapping[str, float]) -> str:
    """SCALED when gaps double from T=1 to T=1/2, RAW when they stay, else UNKNOWN."""
    common = [t for t in at_one if t in at_half]
    pairs = [(a, b) for i, a in enumerate(common) for b in common[i + 1:]]
    if not pairs:
        return UNKNOWN
    a, b = max(pairs, key=lambda p: abs(at_one[p[0]] - at_one[p[1]]))
    gap_one, gap_half = at_one[a] - at_one[b], at_half[a] - at_half[b]
    if abs(gap_one) < 1e-4:
        return UNKNOWN
    ratio = gap_half / gap_one
    if abs(ratio - 2.0) < 0.2:
        return SCALED
    if abs(ratio - 1.0) < 0.1:
        return RAW
    return UNKNOWN


def probe_payload(model: str, temperature: float, prompt: Sequence[int] = PROBE_PROMPT) -> dict[str, Any]:
    return {"model": model, "prompt": list(prompt), "max_tokens": 1, "temperature": temperature, "top_p": 1.0,
            "logprobs": 5, "seed": 0, "return_tokens_as_token_ids": True}


def probe_server(base_url: str, model: str, headers: Mapping[str, str], timeout_s: float = 30.0) -> str:
    """SCALED, RAW or UNKNOWN (no top log-probs, an error) for the server at ``base_url``."""
    import httpx

    try:
        with httpx.Client(base_url=base_url.rstrip("/"), headers=dict(headers), timeout=timeout_s) as client:
            tops = []
            for temperature in (1.0, 0.5):
                resp = client.post("/completions", json=probe_payload(model, temperature))
                if resp.status_code >= 400:
                    return UNKNOWN
                tops.append(_top(resp.json()))
    except (httpx.HTTPError, ValueError):
        return UNKNOWN
    return classify(*tops)


def refusal(base_url: str, temperature: float) -> str:
    return (f"the server at {base_url} returns raw log-probs (before temperature), but sampling.temperature="
            f"{temperature:g}: the trainer's differ. Restart vLLM with --logprobs-mode processed_logprobs (or "
            "sample at temperature 1), or set engine.logprob_check=false to go on anyway")
