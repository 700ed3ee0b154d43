"""Property tests are reproducible: derandomised by the profile tests/conftest.py loads, each of them."""
from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).parent.parent


def property_tests():
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        text = path.read_text()
        if "@given" not in text:
            continue
        module = importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for name, value in vars(module).items():
            if name.startswith("test_") and getattr(value, "is_hypothesis_test", False):
                yield f"{path.relative_to(ROOT)}::{name}", value


@pytest.mark.skipif(os.environ.get("HYPOTHESIS_PROFILE", "ci") != "ci", reason="another profile was asked for")
def test_every_property_test_draws_the_same_examples_every_run():
    found = dict(property_tests())
    assert len(found) >= 15, sorted(found)
    assert settings.default.derandomize
    random = [name for name, test in found.items() if not test._hypothesis_internal_use_settings.derandomize]
    assert random == []
