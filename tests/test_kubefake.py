"""kubefake's apiserver where it stands in for a real one: lists by label selector, as the
apiserver reads them."""
from __future__ import annotations

import pytest

from kubefake.apiserver import label_selector


@pytest.mark.parametrize("selector, selected", [
    ("", True),
    ("name=rel,owner=helm", True),
    ("name==rel", True),
    ("name=other", False),
    ("owner!=helm", False),
    ("status in (deployed, superseded)", True),
    ("status notin (deployed)", False),
    ("absent notin (x)", True),
    ("owner", True),
    ("!owner", False),
    ("!absent,name in (rel)", True),
])
def test_label_selectors(selector, selected):
    assert label_selector(selector)({"name": "rel", "owner": "helm", "status": "deployed"}) is selected
