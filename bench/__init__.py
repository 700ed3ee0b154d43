"""Benchmarks: the admission path against a bare aiohttp server, and the cache's memory.

Run `python -m bench --help` (or `make bench`). These are commands, not timed tests.
"""
