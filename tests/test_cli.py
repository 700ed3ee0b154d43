"""The CLI as users run it: a separate process."""
import json
import subprocess
import sys

import pytest
import yaml
from kube import FIXTURES, apply_valid, decode_patch

STATE = str(FIXTURES / "longhorn-rwx.yaml")
EXAMPLES = FIXTURES.parent.parent / "examples"


def cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "webhook", *args], input=stdin, capture_output=True, text=True, timeout=60)


def test_review_of_the_fixture_pins_to_node_b():
    done = cli("review", "--state", STATE, str(FIXTURES / "admission-review.json"))
    assert done.returncode == 0, done.stderr
    envelope = json.loads(done.stdout)
    pod = json.loads((FIXTURES / "admission-review.json").read_text())["request"]["object"]
    result = apply_valid(pod, decode_patch(envelope))
    assert result["metadata"]["annotations"]["kubevirt-scheduler/node"] == "node-b"
    assert "pinned to node-b" in done.stderr


def test_review_of_a_bare_pod_from_stdin_needs_a_namespace():
    pod_yaml = (FIXTURES / "virt-launcher-pod.yaml").read_text()
    assert cli("review", "--state", STATE, stdin=pod_yaml).returncode == 2
    done = cli("review", "--state", STATE, "--namespace", "default", "-", stdin=pod_yaml)
    assert done.returncode == 0, done.stderr
    assert decode_patch(json.loads(done.stdout))


def test_review_of_a_migration_target_is_untouched():
    done = cli("review", "--state", STATE, "-n", "default", str(FIXTURES / "migration-target-pod.yaml"))
    assert json.loads(done.stdout)["response"] == {"uid": "dry-run", "allowed": True}


@pytest.mark.parametrize("args, message", [
    (["review", "--state", "/nonexistent.yaml", str(FIXTURES / "admission-review.json")], "No such file"),
    (["review", "--state", STATE, str(FIXTURES / "longhorn-rwx.yaml")], "error:"),
])
def test_review_errors_are_clear(args, message):
    done = cli(*args)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_certs_writes_a_bundle(tmp_path):
    done = cli("certs", "--service", "colocate", "--namespace", "kv", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "tls.key").stat().st_mode & 0o777 == 0o600
    assert {p.name for p in tmp_path.iterdir()} >= {"ca.crt", "tls.crt", "tls.key"}


def test_review_of_a_share_manager_pod_in_a_cold_start_prints_the_pin():
    done = cli("review", "--state", str(EXAMPLES / "cold-start.yaml"), str(EXAMPLES / "share-manager-pod.yaml"))
    assert done.returncode == 0, done.stderr
    pod = yaml.safe_load((EXAMPLES / "share-manager-pod.yaml").read_text())
    result = apply_valid(pod, decode_patch(json.loads(done.stdout)))
    assert result["metadata"]["annotations"]["kubevirt-scheduler/node"] == "node-a"
    assert "pinned to node-a" in done.stderr
