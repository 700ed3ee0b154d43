"""Times as Kubernetes writes them."""
from datetime import UTC, datetime

import pytest

from webhook.rules.shared.times import parse_time


@pytest.mark.parametrize("text, parsed", [
    ("2026-11-20T09:58:31Z", datetime(2026, 11, 20, 9, 58, 31, tzinfo=UTC)),
    ("2026-11-20T09:58:31.123456789Z", datetime(2026, 11, 20, 9, 58, 31, 123456, tzinfo=UTC)),
    ("2026-11-20T10:58:31+01:00", datetime(2026, 11, 20, 9, 58, 31, tzinfo=UTC)),
    ("2026-11-20T09:58:31", None),
    ("2026-11-20", None),
    ("soon", None),
    (None, None),
    (1700000000, None),
], ids=["utc", "nanoseconds", "offset", "no-zone", "date", "word", "none", "number"])
def test_parse_time(text, parsed):
    assert parse_time(text) == parsed
