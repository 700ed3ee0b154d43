"""The benchmark's floor: `serve` as it runs (`python -m bench.floor` takes serve's flags), with
every review parsed and allowed, nothing decided, recorded or logged, so that `python -m bench`
can tell what serving costs from what the rules add."""
from __future__ import annotations

import asyncio
import sys

import orjson

from webhook.admission import review as reviews
from webhook.admission import server
from webhook.admission.budget import Budget
from webhook.admission.outcome import Outcome, Rule
from webhook.admission.service import Service
from webhook.cli.parser import build_parser
from webhook.cli.serve import run_serve
from webhook.deadline import Deadline
from webhook.process.loop import new_event_loop

NOTHING_DECIDED = Outcome(Rule.NONE)  # allowed, no patch


class Allowing(server.Admissions):
    """The admission endpoint that parses each review and allows it (a body that is no review is still refused)."""

    async def answer(self, raw: bytes | bytearray, deadline: Deadline, started: float,
                     arrived: float | None = None) -> bytes:
        return orjson.dumps(reviews.build_response(server.parsed(raw).uid, NOTHING_DECIDED))


class FloorService(Service):
    """`serve`'s Service, its admission port answering as `Allowing` does."""

    def webhook(self) -> server.Webhook:
        admissions = Allowing(self.store, self.settings, self.events, lag=self.lag,
                              budget=Budget(self.listen.body_budget))
        return server.Webhook(admissions, self.arrivals)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(["serve", *(sys.argv[1:] if argv is None else argv)])
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(run_serve(args, FloorService))


if __name__ == "__main__":
    sys.exit(main())
