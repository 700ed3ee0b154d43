"""A command the tests run whole (a benchmark, which starts servers of its own): bounded in time,
and on timeout ended with everything it started, so that no server outlives the test."""
from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path


def run(command: Sequence[str], *, cwd: Path, timeout: float,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(..., capture_output=True, text=True)`, in a process group of its own that is
    killed whole when `timeout` passes (then TimeoutExpired, as subprocess.run raises it)."""
    with subprocess.Popen(list(command), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)
