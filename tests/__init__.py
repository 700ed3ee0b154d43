"""The tests, a package mirroring the project's (`tests/rules/placement/` tests `webhook/rules/placement/`);
helpers in `tests.support`."""
