"""The emulator refuses what kube-apiserver refuses (tests/support/refusals.py): each case here has
its twin, of the same name, on the real apiserver in tests/real/test_refusals.py."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.support import refusals
from tests.support.refusals import ACCEPTED, REFUSED

from kubefake.apiserver import Apiserver, serve

ROOT = Path(__file__).parent.parent


@pytest.fixture
async def emulator():
    """kubefake's apiserver over HTTP on loopback, and a request function for it."""
    runner = await serve(Apiserver())
    host, port = runner.addresses[0][:2]
    async with aiohttp.ClientSession() as session:
        async def request(method: str, url: str, body: Any, content_type: str) -> tuple[int, Any]:
            data = None if body is None else json.dumps(body)
            async with session.request(method, url, data=data, headers={"Content-Type": content_type}) as response:
                return response.status, await response.json(content_type=None)

        yield request, f"http://{host}:{port}"
    await runner.cleanup()


@pytest.mark.parametrize("case", REFUSED, ids=[c.id for c in REFUSED])
async def test_the_apiserver_refuses_it(emulator, case):
    await refusals.refused(case, *emulator)


@pytest.mark.parametrize("case", ACCEPTED, ids=[c.id for c in ACCEPTED])
async def test_the_apiserver_accepts_it(emulator, case):
    await refusals.accepted(case, *emulator)


def test_every_refusal_has_both_halves_and_is_listed():
    """docs/testing.md lists each case once; the real module runs the same tests on the same cases."""
    from tests.real import test_refusals as real

    here = {name for name in globals() if name.startswith("test_the_apiserver")}
    there = {name for name in vars(real) if name.startswith("test_the_apiserver")}
    assert here == there == {"test_the_apiserver_refuses_it", "test_the_apiserver_accepts_it"}
    for name in here:
        ours, theirs = globals()[name], getattr(real, name)
        assert ([m.args for m in ours.pytestmark if m.name == "parametrize"]
                == [m.args for m in theirs.pytestmark if m.name == "parametrize"]), name
    text = (ROOT / "docs" / "testing.md").read_text()
    listed = re.findall(r"^\| `([^`]+)` \|", text, re.M)
    assert sorted(listed) == sorted(case.id for case in refusals.CASES)
