"""`python -m webhook serve` with its admission replaced by "parse the review, answer allowed".

The same process as the full path (its caches, uvloop, TLS, aiohttp app and handler, the
timeout and Content-Type checks) minus what an admission decides and writes: the benchmark
measures it beside the other two servers, so the full path's cost splits into what serving
costs and what the admission adds inside a loaded server.

    python -m bench.floor serve [the flags of `python -m webhook serve`]
"""
from __future__ import annotations

import sys

import orjson

from webhook.__main__ import main as webhook_main
from webhook.admission import review as reviews
from webhook.admission import server
from webhook.deadline import Deadline


async def parse_and_allow(self: server.Admissions, raw: bytes, deadline: Deadline, started: float) -> bytes:
    review = reviews.parse_review(orjson.loads(raw))
    return reviews.response_json(review.uid, _ALLOWED)


class _Allowed:
    """An Outcome with nothing to say: no patch, no warnings, no decision."""

    patch = warnings = ()
    decision = None


_ALLOWED = _Allowed()


if __name__ == "__main__":
    server.Admissions.answer = parse_and_allow  # type: ignore[method-assign]
    sys.exit(webhook_main(sys.argv[1:]))
