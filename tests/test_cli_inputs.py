"""Bad input to any verb is one line on stderr and exit 2, naming where it came from (the file, the
flag, the COLOCATE_* variable, "kubeconfig"), never a traceback: property tests over malformed
files and values, the command line run in this process as `main` runs it."""
from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from unittest import mock

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.kube import FIXTURES

from webhook.cli import main
from webhook.config import SETTINGS

ROOT = Path(__file__).parent.parent
STATE, REVIEW = str(ROOT / "examples" / "cluster.yaml"), str(FIXTURES / "admission-review.json")
SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# No credentials but those given: no in-cluster, no KUBECONFIG, no ~/.kube/config.
CLEAN = {k: v for k, v in os.environ.items() if not k.startswith(("COLOCATE_", "KUBERNETES_", "KUBECONFIG"))}

values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=12),
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                      max_leaves=8)
shaped = st.fixed_dictionaries({"kind": st.sampled_from(["Pod", "AdmissionReview", "Config", "Node"])},
                               optional={"apiVersion": values, "metadata": values, "spec": values, "request": values,
                                         "items": values, "contexts": values, "clusters": values,
                                         "current-context": values})
files = st.one_of(
    st.binary(max_size=120),
    st.text(max_size=120).map(str.encode),
    values.map(lambda v: yaml.safe_dump(v).encode()),
    shaped.map(lambda v: yaml.safe_dump(v).encode()),
    st.lists(shaped, min_size=2, max_size=3).map(lambda docs: yaml.safe_dump_all(docs).encode()),
)


def run(argv: list[str], env: dict[str, str], home: Path) -> tuple[int, str]:
    """`kubevirt-colocate ARGV` in this process: its exit status and stderr. An exception other than
    SystemExit escapes: a traceback fails the test."""
    err = io.StringIO()
    with mock.patch.dict(os.environ, {**CLEAN, "HOME": str(home), **env}, clear=True), \
            contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, err.getvalue()


def assert_one_line_naming(code: int, err: str, *sources: str) -> None:
    if code == 0:
        return
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (code, err)
    assert any(source in lines[0] for source in sources), (sources, err)


def written(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


@SLOW
@given(data=files, which=st.sampled_from(["request", "state"]))
def test_review_of_any_file_is_a_decision_or_one_line_naming_the_file(tmp_path, data, which):
    bad = written(tmp_path, which, data)
    state, request = (bad, REVIEW) if which == "state" else (STATE, bad)
    code, err = run(["review", "--state", state, request], {}, tmp_path)
    assert_one_line_naming(code, err, bad)


# The verbs that read the cluster, each with what it needs besides its credentials.
CLUSTER_VERBS = {
    "status": ["status"], "explain": ["explain", "default/vm1"], "spare-vms": ["spare-vms"],
    "certs": ["certs", "--service", "s", "--namespace", "n", "--secret", "s"],
    "keep": ["keep", "--lease-namespace", "n", "--metrics-port", "0"],
}


@SLOW
@given(data=files, verb=st.sampled_from(list(CLUSTER_VERBS)), how=st.sampled_from(["flag", "variable"]))
def test_any_kubeconfig_file_is_one_line_naming_the_kubeconfig(tmp_path, data, verb, how):
    config = written(tmp_path, "config", data)
    flag, env = (["--kubeconfig", config], {}) if how == "flag" else ([], {"KUBECONFIG": config})
    code, err = run([*CLUSTER_VERBS[verb], *flag], env, tmp_path)
    assert code != 0  # nothing here is a kubeconfig that reaches a cluster
    assert_one_line_naming(code, err, "kubeconfig", "KUBECONFIG")


SETTING_VERBS = {"review": ["review", "--state", STATE, REVIEW], "status": ["status"], "explain": ["explain", "ns/vm"]}


@SLOW
@given(row=st.sampled_from([row for row in SETTINGS if row.flag is not None]), raw=st.text(min_size=1, max_size=12),
       verb=st.sampled_from(list(SETTING_VERBS)))
def test_any_value_of_a_setting_in_the_environment_is_read_or_named(tmp_path, row, raw, verb):
    if "\x00" in raw:
        return  # no environment can hold it
    code, err = run(SETTING_VERBS[verb], {row.env: raw}, tmp_path)
    if code != 0 and row.env in err:
        assert_one_line_naming(code, err, row.env)
    else:  # accepted: the verb went on (to the cluster, where there are no credentials here)
        assert code in (0, 2) and "Traceback" not in err and "must be" not in err, err


@SLOW
@given(row=st.sampled_from([row for row in SETTINGS if row.flag is not None and "review" in row.flag.verbs]),
       raw=st.text(min_size=1, max_size=12).filter(lambda t: not t.startswith("-") and "\x00" not in t))
def test_any_value_of_a_flag_is_read_or_named(tmp_path, row, raw):
    code, err = run(["review", "--state", STATE, row.option, raw, REVIEW], {}, tmp_path)
    assert_one_line_naming(code, err, row.option)


@SLOW
@given(flag=st.sampled_from(["--request-timeout", "-o", "--drain", "-n"]), raw=st.text(min_size=1, max_size=12).filter(
    lambda t: not t.startswith("-") and "\x00" not in t))
def test_any_value_of_a_kubectl_flag_is_read_or_named(tmp_path, flag, raw):
    code, err = run(["status", flag, raw], {}, tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1, err  # no credentials here, or the flag refused
    assert flag in err or "kubeconfig" in err.lower() or "credentials" in err, err
