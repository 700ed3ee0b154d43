"""Bad input to any verb is one line on stderr and exit 2, naming where it came from (the file, the
flag, the COLOCATE_* variable, "kubeconfig"), never a traceback: property tests over malformed
files and values, the command line run in this process as `main` runs it."""
from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
from pathlib import Path
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.kube import FIXTURES

from webhook.cli import build_parser, main
from webhook.cli import values as flag_values
from webhook.config import SETTINGS, Seconds, Settings, duration_text, seconds

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
    SystemExit escapes: a traceback fails the test. The logging `serve` and `keep` set up is undone."""
    err, root = io.StringIO(), logging.getLogger()
    handlers, level = root.handlers[:], root.level
    with mock.patch.dict(os.environ, {**CLEAN, "HOME": str(home), **env}, clear=True), \
            contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
        finally:
            root.handlers[:], root.level = handlers, level
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
@given(row=st.sampled_from([row for row in SETTINGS if row.verbs]), raw=st.text(min_size=1, max_size=12),
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
@given(row=st.sampled_from([row for row in SETTINGS if "review" in row.verbs]),
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


# --------------------------------------------------------------------------- every verb, every kind of value
# Generated from the parser itself (Parser.verbs, Parser.flags): a flag added later is tried too.

PARSER = build_parser()
# Each verb with what it needs to reach the value under test; no cluster is ever reached here.
BASE = {
    "serve": ["serve", "--state", STATE], "keep": ["keep", "--lease-namespace", "n", "--metrics-port", "0"],
    "review": ["review", "--state", STATE, REVIEW], "explain": ["explain", "default/vm1"], "status": ["status"],
    "certs": ["certs", "--service", "s", "--namespace", "n", "--secret", "s"], "spare-vms": ["spare-vms"],
}


def assert_refused(code: int, err: str, *said: str) -> None:
    """Exit 2 and one line on stderr, saying each of `said`; no traceback."""
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, err)
    assert all(part in lines[0] for part in said), (said, err)


def flags_where(test) -> list[tuple[str, str]]:
    """(verb, --flag) of every flag of every verb that `test(action)` picks (refused keeper flags aside)."""
    return [(verb, name) for verb, parser in PARSER.verbs.items() for action in parser.flags
            if action.help != argparse.SUPPRESS and test(action) for name in action.option_strings
            if name.startswith("--")]


def dest(verb: str, flag: str) -> str:
    return next(action.dest for action in PARSER.verbs[verb].flags if flag in action.option_strings)


PORTS = flags_where(lambda action: action.type is flag_values.port)
DURATIONS = flags_where(lambda action: action.type in (flag_values.delay, flag_values.timeout))
HOSTS = flags_where(lambda action: action.type is flag_values.host)
KUBECONFIGS = [verb for verb, _ in flags_where(lambda action: "--kubeconfig" in action.option_strings)]
CONTEXTS = [verb for verb, _ in flags_where(lambda action: "--context" in action.option_strings)]


def test_every_verb_is_tried_and_every_port_and_duration_flag_is_read_as_one():
    assert set(BASE) == set(PARSER.verbs)
    assert set(PORTS) == set(flags_where(lambda action: any(n.endswith("port") for n in action.option_strings)))
    assert set(DURATIONS) == set(flags_where(lambda action: action.metavar == "DURATION" or any(
        word in action.dest for word in ("timeout", "delay", "after"))))
    assert len(PORTS) == 3 and len(DURATIONS) == 10 and len(HOSTS) == 3 and set(KUBECONFIGS) == set(PARSER.verbs) - {"review"}


@pytest.mark.parametrize("value", ["-1", "65536", "99999", "70000", "http"])
@pytest.mark.parametrize("verb, flag", PORTS)
def test_a_port_out_of_range_is_refused_by_name(tmp_path, verb, flag, value):
    code, err = run([*BASE[verb], flag, value], {}, tmp_path)
    assert_refused(code, err, f"argument {flag}: ", value, "1-65535")


@pytest.mark.parametrize("value", ["not a host", "", "host_name", "*.example.com"])
@pytest.mark.parametrize("verb, flag", HOSTS)
def test_an_address_that_is_no_address_is_refused_by_name(tmp_path, verb, flag, value):
    code, err = run([*BASE[verb], flag, value], {}, tmp_path)
    assert_refused(code, err, f"argument {flag}: ", repr(value), "neither an IP address")


def test_a_port_in_use_is_said_with_its_address(tmp_path, pem_files):
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "webhook", *BASE["serve"], "--tls-cert-file", str(pem_files / "tls.crt"),
                               "--tls-key-file", str(pem_files / "tls.key"), "--host", "127.0.0.1", "--port", str(port),
                               "--metrics-host", "127.0.0.1", "--metrics-port", "0"],
                              capture_output=True, text=True, timeout=60, env={**CLEAN, "HOME": str(tmp_path)})
    errors = [line for line in done.stderr.splitlines() if not line.startswith("{")]  # the JSON log lines aside
    assert done.returncode == 2 and errors == [f"error: cannot listen on 127.0.0.1:{port}: address already in use"], \
        done.stderr


@pytest.mark.parametrize("value, seconds", [("600", 600), ("600s", 600), ("10m", 600), ("1h", 3600), ("1h30m", 5400),
                                            ("1.5s", 1.5), ("500ms", 0.5)])
@pytest.mark.parametrize("verb, flag", DURATIONS)
def test_every_duration_flag_takes_the_one_syntax(verb, flag, value, seconds):
    assert getattr(PARSER.parse_args([*BASE[verb], flag, value]), dest(verb, flag)) == seconds


@pytest.mark.parametrize("value", ["10x", "-5", "1d", "ten", "1h 30m", "m"])
@pytest.mark.parametrize("verb, flag", DURATIONS)
def test_a_duration_in_another_syntax_is_refused_by_name(tmp_path, verb, flag, value):
    code, err = run([*BASE[verb], flag, value], {}, tmp_path)
    assert_refused(code, err, f"argument {flag}: ", repr(value), "600, 600s, 10m")


DURATION_SETTINGS = [row for row in SETTINGS if row.kind is Seconds]


@pytest.mark.parametrize("value, seconds", [("600", 600), ("600s", 600), ("10m", 600), ("1h", 3600), ("0", 0)])
@pytest.mark.parametrize("row", DURATION_SETTINGS, ids=lambda row: row.env)
def test_every_duration_variable_takes_the_one_syntax(row, value, seconds):
    assert getattr(Settings.from_env({row.env: value}), row.name) == seconds


@pytest.mark.parametrize("value", ["10x", "-5", "soon"])
@pytest.mark.parametrize("row", DURATION_SETTINGS, ids=lambda row: row.env)
def test_a_duration_variable_in_another_syntax_is_refused_by_name(tmp_path, row, value):
    code, err = run(BASE["status"], {row.env: value}, tmp_path)
    assert_refused(code, err, row.env, repr(value), "600, 600s, 10m")


@given(value=st.integers(0, 10 ** 9).map(lambda ms: ms / 1000))
def test_a_duration_as_status_prints_it_is_read_back_as_the_same(value):
    assert seconds(duration_text(value)) == pytest.approx(value, abs=1e-9)


@pytest.fixture(scope="module")
def pem_files(tmp_path_factory):
    """A good pair and its CA, and the files an admin mistakes for them."""
    from webhook.tools import certs

    out = tmp_path_factory.mktemp("pem")
    certs.write(certs.generate(["localhost"]), out)
    (out / "other.key").write_bytes(certs.generate(["localhost"]).key)
    (out / "text").write_text("hello\n")
    (out / "dir").mkdir()
    return out


CERT_FLAGS = {"--tls-cert-file": "tls.crt", "--tls-key-file": "tls.key", "--client-ca-file": "ca.crt"}
BAD_PEM = {  # the file given, and what is said of it, for each flag
    "missing": {flag: ("nosuch", "no such file") for flag in CERT_FLAGS},
    "a directory": {flag: ("dir", "a directory, not a file") for flag in CERT_FLAGS},
    "text": {"--tls-cert-file": ("text", "not a PEM certificate"), "--tls-key-file": ("text", "not a PEM private key"),
             "--client-ca-file": ("text", "not a PEM certificate")},
    "the other kind": {"--tls-cert-file": ("tls.key", "a private key, not a certificate"),
                       "--client-ca-file": ("tls.key", "a private key, not a "
                       "certificate"), "--tls-key-file": ("ca.crt", "a certificate, not a private key")},
    "another pair's": {"--tls-key-file": ("other.key", "not the private key of the certificate in")},
}
PEM_CASES = [(kind, flag) for kind, flags in BAD_PEM.items() for flag in flags]


@pytest.mark.parametrize("kind, flag", PEM_CASES)
def test_a_bad_certificate_or_key_file_is_named_with_what_is_wrong(tmp_path, pem_files, kind, flag):
    files = {**{f: str(pem_files / name) for f, name in CERT_FLAGS.items()}, flag: str(pem_files / BAD_PEM[kind][flag][0])}
    code, err = run([*BASE["serve"], *(word for pair in files.items() for word in pair)], {}, tmp_path)
    assert_refused(code, err, f"error: {flag} {files[flag]}: ", BAD_PEM[kind][flag][1])
    assert "PEM lib" not in err


DEEP = {
    "JSON, 1025 levels": "[" * 1025 + "]" * 1025,
    "JSON, 5000 levels": '{"a":' * 5000 + "1" + "}" * 5000,
    "YAML, 1000 levels": "".join("  " * i + "a:\n" for i in range(1000)) + "  " * 1000 + "1\n",
    "YAML flow, 3000 levels": "a: " + "[" * 3000 + "]" * 3000,
}
NESTING_VERBS = {"review's request": lambda bad: ["review", "--state", STATE, bad],
                 "review --state": lambda bad: ["review", "--state", bad, REVIEW],
                 "serve --state": lambda bad: ["serve", "--state", bad]}


@pytest.mark.parametrize("where", NESTING_VERBS)
@pytest.mark.parametrize("shape", DEEP)
def test_deep_nesting_is_refused_as_the_server_refuses_it(tmp_path, shape, where):
    bad = written(tmp_path, "deep", DEEP[shape].encode())
    code, err = run(NESTING_VERBS[where](bad), {}, tmp_path)
    assert_refused(code, err, f"error: {bad}: nested too deeply", "1024 levels")


def test_nesting_the_server_takes_is_taken(tmp_path):
    """1024 levels: what orjson, and so the admission server, still reads."""
    pod = '{"kind":"Pod","metadata":{"name":"p","namespace":"d"},"spec":{"x":' + "[" * 1021 + "]" * 1021 + "}}"
    code, err = run(["review", "--state", STATE, written(tmp_path, "pod.json", pod.encode())], {}, tmp_path)
    assert code == 0 and err.startswith("# untouched"), err


BAD_KUBECONFIGS = {"missing": (None, "no such file"), "empty": (b"", "empty: not a kubeconfig"),
                   "a directory": ("dir", "a directory, not a file"), "a list": (b"- a\n", "not a kubeconfig: a YAML list")}
GOOD_KUBECONFIG = b"""apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: here, context: {cluster: c, user: u}}]
current-context: here
"""


def kubeconfig_args(verb: str, pem: Path) -> list[str]:
    """The verb, reading the cluster: `serve` without --state, with its certificate."""
    if verb != "serve":
        return BASE[verb]
    return ["serve", "--tls-cert-file", str(pem / "tls.crt"), "--tls-key-file", str(pem / "tls.key")]


@pytest.mark.parametrize("how", ["--kubeconfig", "KUBECONFIG"])
@pytest.mark.parametrize("kind", BAD_KUBECONFIGS)
@pytest.mark.parametrize("verb", KUBECONFIGS)
def test_a_bad_kubeconfig_is_named_with_what_is_wrong(tmp_path, pem_files, verb, kind, how):
    data, said = BAD_KUBECONFIGS[kind]
    path = str(tmp_path / "nosuch") if data is None else str(tmp_path) if data == "dir" else written(tmp_path, "kc", data)
    flag, env = ([how, path], {}) if how == "--kubeconfig" else ([], {how: path})
    code, err = run([*kubeconfig_args(verb, pem_files), *flag], env, tmp_path)
    assert_refused(code, err, f"{how}{' ' if flag else '='}{path} ({said}")


@pytest.mark.parametrize("how", ["--kubeconfig", "KUBECONFIG"])
@pytest.mark.parametrize("verb", CONTEXTS)
def test_a_context_that_does_not_exist_is_said_as_kubectl_says_it(tmp_path, verb, how):
    path = written(tmp_path, "kc", GOOD_KUBECONFIG)
    flag, env = ([how, path], {}) if how == "--kubeconfig" else ([], {how: path})
    code, err = run([*BASE[verb], "--context", "nosuch", *flag], env, tmp_path)
    assert_refused(code, err, f'error: context "nosuch" does not exist in {how}')


@pytest.mark.parametrize("argv", [["--bogus"], ["--bogus", "status"], ["--bogus=1"],
                                  *([*BASE[verb], "--bogus"] for verb in BASE)], ids=" ".join)
def test_an_unknown_flag_is_named(tmp_path, argv):
    code, err = run(argv, {}, tmp_path)
    assert_refused(code, err, "unrecognized arguments: --bogus")


LOGGING = [verb for verb, _ in flags_where(lambda action: "--log-level" in action.option_strings)]


@pytest.mark.parametrize("raw", ["loud", "verbose", "5"])
@pytest.mark.parametrize("verb", LOGGING)
def test_a_bad_log_level_is_named_with_the_levels(tmp_path, verb, raw):
    code, err = run(BASE[verb], {"LOG_LEVEL": raw}, tmp_path)
    assert_refused(code, err, f"LOG_LEVEL={raw}: ", "debug, info, warning, error")
    code, err = run([*BASE[verb], "--log-level", raw], {}, tmp_path)
    assert_refused(code, err, "argument --log-level: ", "debug, info, warning, error")


BAD_SETTING = {bool: "maybe", int: "many", Seconds: "soon"}
# Each verb run so that it fails, or ends, after reading its settings (`serve` at its certificate).
AFTER_SETTINGS = {**BASE, "serve": [*BASE["serve"], "--tls-cert-file", "/nonexistent"]}


def bad_setting(row) -> str | None:
    if row.choices is not None or row.kind in BAD_SETTING:
        return BAD_SETTING.get(row.kind, "maybe")
    names = {"opt_in_annotation": "not a key!", "longhorn_namespace": "Not_A_Namespace",
             "lease_namespace": "Not_A_Namespace", "lease_name": "not a name"}
    return names.get(row.name)


@pytest.mark.parametrize("verb, row", [(verb, row) for verb in BASE for row in SETTINGS
                                       if row.verbs and bad_setting(row) is not None],
                         ids=lambda value: getattr(value, "env", value))
def test_a_bad_variable_is_named_by_the_verbs_that_read_it_and_no_other(tmp_path, verb, row):
    code, err = run(AFTER_SETTINGS[verb], {row.env: bad_setting(row)}, tmp_path)
    if verb in row.verbs:
        assert_refused(code, err, row.env)
    else:  # not this verb's setting: it ends as it does without the variable
        unset_code, unset_err = run(AFTER_SETTINGS[verb], {}, tmp_path)
        assert (code, err.strip().splitlines()[-1]) == (unset_code, unset_err.strip().splitlines()[-1]), err


# --------------------------------------------------------------------------- the cases an operator hit, by name

def deep_json(levels: int) -> bytes:
    return ('{"a":' * levels + "1" + "}" * levels).encode()


def deep_yaml(levels: int) -> bytes:
    return ("".join("  " * i + "a:\n" for i in range(levels)) + "  " * levels + "1\n").encode()


LISTED = {  # what was typed (FILE: a file written with these bytes), the environment, what the one line says
    "serve --port 99999 --metrics-port 70000": (["serve", "--state", STATE, "--port", "99999", "--metrics-port", "70000"],
                                                {}, "argument --port: 99999 is not a port: 1-65535"),
    "serve --metrics-port 70000": (["serve", "--state", STATE, "--metrics-port", "70000"], {},
                                   "argument --metrics-port: 70000 is not a port: 1-65535"),
    "serve --port -1": (["serve", "--state", STATE, "--port", "-1"], {}, "argument --port: -1 is not a port: 1-65535"),
    "review of 800 levels of JSON": (["review", "--state", STATE, ("FILE", deep_json(800))], {},
                                     "expected apiVersion admission.k8s.io/v1 and kind AdmissionReview"),
    "review of 800 levels of YAML": (["review", "--state", STATE, ("FILE", deep_yaml(800))], {},
                                     "expected apiVersion admission.k8s.io/v1 and kind AdmissionReview"),
    "review of 2000 levels of JSON": (["review", "--state", STATE, ("FILE", deep_json(2000))], {},
                                      "nested too deeply: the webhook reads at most 1024 levels"),
    "review of a YAML list": (["review", "--state", STATE, ("FILE", b"- kind: Pod\n- kind: Pod\n")], {},
                              "a list, not an object; one is read (an AdmissionReview or a Pod)"),
    "review of a List": (["review", "--state", STATE, ("FILE", b"kind: List\nitems: [{kind: Pod}]\n")], {},
                         "a List of 1 objects; one is read"),
    "review of a directory": (["review", "--state", STATE, "/"], {}, "error: /: a directory, not a file"),
    "status --context nosuch": (["status", "--context", "nosuch", "--kubeconfig", ("FILE", GOOD_KUBECONFIG)], {},
                                'context "nosuch" does not exist in --kubeconfig'),
    "status with an empty kubeconfig": (["status", "--kubeconfig", ("FILE", b"")], {}, "(empty: not a kubeconfig)"),
    "status with a directory for kubeconfig": (["status", "--kubeconfig", "/"], {},
                                               "--kubeconfig / (a directory, not a file)"),
    "certs --days 0": (["certs", "--service", "s", "--namespace", "n", "--out", "/nonexistent", "--days", "0"], {},
                       "argument --days: 0 is not a validity in days: 1-36500"),
    "certs --days -3": (["certs", "--service", "s", "--namespace", "n", "--out", "/nonexistent", "--days", "-3"], {},
                        "argument --days: -3 is not a validity in days: 1-36500"),
    "certs --extra-san 'not a san!!'": (["certs", "--service", "s", "--namespace", "n", "--out", "/nonexistent",
                                         "--extra-san", "not a san!!"], {},
                                        "argument --extra-san: 'not a san!!' is neither a DNS name"),
    "certs --service Not_A_Name": (["certs", "--service", "Not_A_Name", "--namespace", "n", "--out", "/nonexistent"],
                                   {}, "argument --service: 'Not_A_Name' is not a DNS-1123 label"),
    "status --keep-after 10 minutes": (["status", "--keep-after", "10 minutes"], {},
                                       "argument --keep-after: '10 minutes' is not a duration"),
    "kubevirt-colocate --bogus": (["--bogus"], {}, "kubevirt-colocate: error: unrecognized arguments: --bogus"),
    "LOG_LEVEL=loud serve": (["serve", "--state", STATE], {"LOG_LEVEL": "loud"},
                             "LOG_LEVEL=loud: 'loud' is not a log level: debug, info, warning, error"),
    "LOG_LEVEL=loud keep": (["keep", "--lease-namespace", "n"], {"LOG_LEVEL": "loud"},
                            "LOG_LEVEL=loud: 'loud' is not a log level: debug, info, warning, error"),
}


@pytest.mark.parametrize("case", LISTED)
def test_a_listed_input_is_refused_in_one_line_that_names_it(tmp_path, case):
    typed, env, said = LISTED[case]
    argv = [written(tmp_path, f"file{i}", word[1]) if isinstance(word, tuple) else word for i, word in enumerate(typed)]
    code, err = run(argv, env, tmp_path)
    assert_refused(code, err, said)


def test_serve_with_a_file_that_is_not_a_certificate_names_it(tmp_path, pem_files):
    code, err = run([*BASE["serve"], "--tls-cert-file", str(pem_files / "text"), "--tls-key-file",
                     str(pem_files / "tls.key")], {}, tmp_path)
    assert_refused(code, err, f"error: --tls-cert-file {pem_files / 'text'}: not a PEM certificate")


def test_serve_with_certificate_and_key_swapped_says_so(tmp_path, pem_files):
    code, err = run([*BASE["serve"], "--tls-cert-file", str(pem_files / "tls.key"), "--tls-key-file",
                     str(pem_files / "tls.crt")], {}, tmp_path)
    assert_refused(code, err, f"--tls-cert-file {pem_files / 'tls.key'}: a private key, and {pem_files / 'tls.crt'} "
                              f"a certificate: the certificate and key files are swapped")


def test_status_takes_the_keep_after_it_prints():
    args = PARSER.parse_args(["status", "--keep-after", "10m", "--request-timeout", "2m"])
    assert (args.keep_after, args.request_timeout) == (600, 120)


def test_the_log_levels_are_listed_in_help():
    for verb in LOGGING:
        assert "--log-level {debug,info,warning,error}" in " ".join(PARSER.verbs[verb].format_help().split())


def test_colocate_keep_maybe_leaves_review_alone(tmp_path):
    """COLOCATE_KEEP is the keeper's: `review` neither reads nor refuses it."""
    code, err = run(BASE["review"], {"COLOCATE_KEEP": "maybe", "COLOCATE_KEEP_AFTER": "soon"}, tmp_path)
    assert code == 0 and err.startswith("# "), err


def test_spare_vms_waits_for_an_api_that_never_answers_as_long_as_request_timeout_says(tmp_path):
    """An API that accepts the connection and never answers: `spare-vms --request-timeout 1s` gives up
    after about a second (it waited 31 s), naming the timeout."""
    import socket
    import time

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel accepts; nothing ever answers
        config = GOOD_KUBECONFIG.replace(b"127.0.0.1:1", f"127.0.0.1:{silent.getsockname()[1]}".encode())
        started = time.monotonic()
        code, err = run(["spare-vms", "--request-timeout", "1s", "--kubeconfig", written(tmp_path, "kc", config)], {},
                        tmp_path)
        took = time.monotonic() - started
    assert code == 1 and "timed out" in err and len(err.strip().splitlines()) == 1, err
    assert took < 10, took
