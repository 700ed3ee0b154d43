"""The benchmark command works end to end (tiny and quick here; its numbers come from `make bench`)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.load import parse_wrk

ROOT = Path(__file__).resolve().parent.parent

WRK_OUTPUT = """\
Running 5s test @ https://127.0.0.1:40000/mutate?timeout=10s
  1 threads and 4 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   612.40us  201.10us   9.10ms   93.12%
    Req/Sec     6.54k   310.22     6.90k    80.00%
  Latency Distribution
     50%  571.00us
     75%  640.00us
     90%  710.00us
     99%    1.21ms
  32541 requests in 5.00s, 48.12MB read
  Socket errors: connect 0, read 1, write 0, timeout 0
  Non-2xx or 3xx responses: 2
Requests/sec:   6508.20
"""


def test_wrk_output_is_read_with_its_units():
    result = parse_wrk(WRK_OUTPUT)
    assert (result.requests, result.seconds, result.errors) == (32541, 5.0, 3)
    assert (result.p50_ms, result.p99_ms) == (pytest.approx(0.571), pytest.approx(1.21))
    assert round(result.rps) == 6508


def bench(*args, path=None):
    env = dict(os.environ, PATH=path) if path else None
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=env)


def test_without_wrk_the_bench_says_so():
    no_wrk = str(Path(sys.executable).parent)
    done = bench("--load", "wrk", path=no_wrk)
    assert done.returncode != 0 and "wrk is not installed" in done.stderr


def test_a_tiny_run_reports_every_figure():
    done = bench("--load", "asyncio", "--duration", "0.3", "--rounds", "1", "--connections", "2",
                 "--memory", "100,10,20", "--inprocess-rounds", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for line in ("full admission path (cache)", "bare aiohttp, stdlib json", "ratio full / bare",
                 "API requests during the full-path runs: 0", "API-fallback path", "RSS ", "targets: ",
                 "in-process admission", "kube-scheduler's checks add", "serve, parse and allow only"):
        assert line in out, out
    for row in ("full admission path (cache)", "bare aiohttp, stdlib json", "serve, parse and allow only"):
        answered = next(line for line in out.splitlines() if line.startswith(row))
        assert answered.split()[-1] == "0" and float(answered.split()[-5]) > 0, answered  # no errors, some req/s
    cached = next(line for line in out.splitlines() if line.startswith("cached: "))
    for held in ("100 persistentvolumeclaims", "100 persistentvolumes", "10 sharemanagers in longhorn-system"):
        assert held in cached, cached
    assert "errors" in out and " 0   (4.0 GETs" in out  # the fallback path really reads the API
