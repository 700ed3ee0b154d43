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
from kubefake.validation import label_errors

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


def test_each_refusal_is_listed_with_the_words_its_case_expects():
    """docs/testing.md says what kube-apiserver says; both twins expect those words."""
    rows = dict(re.findall(r"^\| `([^`]+)` \|[^|]*\| (.*) \|$", (ROOT / "docs" / "testing.md").read_text(), re.M))
    for case in REFUSED:
        assert rows[case.id].startswith("422 Invalid") and case.refused in rows[case.id], case.id


@pytest.mark.parametrize("labels, said", [
    ({"app": "é" * 32}, ['metadata.labels: Invalid value: "' + "é" * 32 + '": must be no more than 63 bytes']),
    ({"x" * 64: "v"}, [f'metadata.labels: Invalid value: "{"x" * 64}": name part must be no more than 63 bytes']),
    ({"Example.com/app": "v"}, ['metadata.labels: Invalid value: "Example.com/app": prefix part a lowercase RFC 1123 '
                                "subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
                                "start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                                r"validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"]),
    ({"/app": "v"}, ['metadata.labels: Invalid value: "/app": prefix part must be non-empty']),
    ({"app": "v" * 63, "example.com/app": ""}, []),
], ids=["value-bytes", "name-part", "prefix", "empty-prefix", "valid"])
def test_label_words_are_kube_apiserver_1_36s(labels, said):
    """Lengths count bytes, as Go's len() does (k8s.io/apimachinery pkg/api/validate/content, 1.36); the
    first error of each (a value of "é" also fails the pattern)."""
    assert label_errors(labels)[:1] == said
