"""kube-apiserver refuses what the emulator refuses (tests/support/refusals.py): the twins, of the
same names and cases, of tests/test_refusals.py, on the real apiserver."""
from __future__ import annotations

import pytest
from kubefake.envtest import Api
from tests.support import refusals
from tests.support.refusals import ACCEPTED, REFUSED


@pytest.fixture
async def apiserver(control_plane):
    async with Api(control_plane, owns=True) as api:
        await api.namespace(refusals.NAMESPACE)

        async def request(method, url, body, content_type):
            return await api.request(method, url, body, content_type=content_type)

        yield request, control_plane.url
        for case in refusals.CASES:
            await api.request("DELETE", f"{control_plane.url}/api/v1/namespaces/{refusals.NAMESPACE}/pods/"
                              f"{case.created['metadata']['name']}",
                              {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})


@pytest.mark.parametrize("case", REFUSED, ids=[c.id for c in REFUSED])
async def test_the_apiserver_refuses_it(apiserver, case):
    await refusals.refused(case, *apiserver)


@pytest.mark.parametrize("case", ACCEPTED, ids=[c.id for c in ACCEPTED])
async def test_the_apiserver_accepts_it(apiserver, case):
    await refusals.accepted(case, *apiserver)
