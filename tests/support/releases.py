"""Earlier releases' installs, read from git, and the step docs/operations.md adds to a kustomize
upgrade: the `kubectl delete` lines that remove what `kubectl apply -k` leaves behind.

A release's charts/ and manifests/ come from its commit (`git archive`); without that commit (a
shallow clone) the tests that need it skip.
"""
from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.support import docs

ROOT = Path(__file__).resolve().parents[2]
# The last commit with one Deployment for the webhook and the keeper (before 0.2.0).
ONE_DEPLOYMENT = "e1ca05a"
# 0.2.0 as released (`make release VERSION=0.2.0`): the keeper's namespaced grants named `kubevirt-colocate`
# and `kubevirt-colocate-spare-vms`, no state ConfigMap, no right on the webhook's Deployment.
RELEASE_0_2_0 = "2f4b6bb"
UPGRADING = "Upgrading from 0.2.0: the keeper's grants renamed"
# kubectl's resource words for the kinds the step deletes.
KINDS = {"role": "Role", "rolebinding": "RoleBinding", "clusterrole": "ClusterRole",
         "clusterrolebinding": "ClusterRoleBinding", "secret": "Secret", "issuer": "Issuer", "certificate": "Certificate",
         "configmap": "ConfigMap", "lease": "Lease"}
ROLLING_BACK = "## Rolling back"
TURNING_OFF = "## Turning an option off"
RIGHTS_AND_REQUESTS = "### Upgrading from 0.2.0: rights and requests"


def tree_at(commit: str, where: Path, *paths: str) -> Path:
    """charts/ and manifests/ of `commit` (or these paths), extracted into `where`."""
    done = subprocess.run(["git", "archive", "--format=tar", commit, *(paths or ("charts", "manifests"))], cwd=ROOT,
                          capture_output=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"git has no {commit}: {done.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
        archive.extractall(where, filter="tar")
    return where


def section(heading: str) -> tuple[int, int]:
    """The lines of docs/operations.md's section under `heading` (to the next heading of its level or above)."""
    lines = (ROOT / "docs" / "operations.md").read_text().splitlines()
    start, level = lines.index(heading) + 1, heading.split()[0]
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("#")
                and len(lines[i].split()[0]) <= len(level)), len(lines))
    return start, end


def deletes(heading: str) -> list[docs.Command]:
    """The `kubectl delete` commands of docs/operations.md's section under `heading`."""
    path = ROOT / "docs" / "operations.md"
    start, end = section(heading)
    return [command for block in docs.blocks(path) if start < block.line <= end
            for command in docs.commands_of(block) if command.words[:1] == ("kubectl",) and "delete" in command.words]


def upgrade_step() -> list[docs.Command]:
    """The `kubectl delete` commands of docs/operations.md's section on upgrading from 0.2.0."""
    return deletes(f"### {UPGRADING}")


def table(heading: str, first: str) -> list[list[str]]:
    """The rows of the table under `heading` whose header's first cell is `first`, cells as written."""
    lines = (ROOT / "docs" / "operations.md").read_text().splitlines()
    start, end = section(heading)
    rows, inside = [], False
    for line in lines[start:end]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else None
        if cells is None:
            inside = False
        elif cells[0] == first:
            inside = True
        elif inside and not set(line) <= set("|-: "):
            rows.append(cells)
    return rows


def deleted_by(command: docs.Command) -> set[tuple[str, str | None, str]]:
    """(kind, namespace, name) of each object a `kubectl [-n NS] delete TYPE/NAME ...` names."""
    words = list(command.words[1:])
    namespace = None
    for flag in ("-n", "--namespace"):
        if flag in words:
            namespace = words[words.index(flag) + 1]
    found = set()
    for word in words:
        kind, slash, name = word.partition("/")
        if slash and not word.startswith("-"):
            found.add((KINDS[kind], None if KINDS[kind].startswith("Cluster") else namespace, name))
    return found
