"""The Makefile's targets that a contributor runs by hand and that must not pass quietly."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


@pytest.mark.parametrize("assets", [None, "empty"])
def test_make_test_real_fails_in_one_line_without_the_control_plane(tmp_path, assets):
    """Skipped tests would hide that nothing ran: `make test-real` says what to set and fails."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed").touch()  # newer than pyproject.toml and the Makefile: nothing to install
    env = {k: v for k, v in os.environ.items() if k != "KUBEBUILDER_ASSETS"}
    if assets:
        (tmp_path / assets).mkdir()
        env["KUBEBUILDER_ASSETS"] = str(tmp_path / assets)
    done = subprocess.run([make, "--no-print-directory", "test-real", f"VENV={venv}", f"PY={sys.executable}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    ours = [line for line in done.stderr.splitlines() if not re.match(r"make(\[\d+\])?: \*\*\*", line)]  # make's own
    assert len(ours) == 1 and ours[0].startswith("make test-real: "), done.stderr
    assert "KUBEBUILDER_ASSETS" in ours[0] and "kube-apiserver" in ours[0]
    assert done.stdout == ""  # pytest never started


def test_make_demo_installs_the_runtime_dependencies_alone(tmp_path):
    """`make demo` on a fresh clone: a virtualenv without the test tooling, and a line saying what it does."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    done = subprocess.run([make, "--no-print-directory", "-n", "demo", f"VENV={tmp_path / 'venv'}",
                           f"CERTS={tmp_path / 'certs'}"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    installs = [line for line in done.stdout.splitlines() if "pip install" in line]
    assert installs and all(line.rstrip().endswith("-e .") for line in installs), installs  # no [test] extras
    assert "runtime dependencies" in done.stdout  # the line it prints before installing
