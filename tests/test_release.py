"""One version, held together; the krew manifest as krew validates it; `make release` in a copy."""
from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from webhook import __version__
from webhook.__main__ import main

ROOT = Path(__file__).parent.parent


def _script(path: Path) -> ModuleType:
    """A script of hack/ as a module, loaded from its file (hack/ is no package; its `__main__` block is not run)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


release = _script(ROOT / "hack" / "release.py")

MANIFEST = ROOT / "plugins" / "colocate.yaml"


def test_the_version_is_set_once_and_everything_else_follows_it():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" in pyproject["project"]["dynamic"] and "version" not in pyproject["project"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "webhook.__version__"}
    chart = yaml.safe_load((ROOT / "charts" / "kubevirt-colocate" / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (__version__, __version__)  # appVersion: the default tag
    [image] = yaml.safe_load((ROOT / "manifests" / "base" / "kustomization.yaml").read_text())["images"]
    assert image["newTag"] == __version__
    readme = (ROOT / "README.md").read_text()
    tags = re.findall(r"kubevirt-colocate:(\d+\.\d+\.\d+\S*?)[\s`)]", readme) + re.findall(r"newTag: ([^}\s]+)", readme)
    assert tags and set(tags) == {__version__}
    wheels = re.findall(r"releases/download/v([^/\s]+)/kubevirt_colocate-([^-\s]+)-py3", readme)
    assert wheels and set(wheels) == {(__version__, __version__)}
    plugin = yaml.safe_load(MANIFEST.read_text())
    assert plugin["spec"]["version"] == f"v{__version__}"
    [platform] = plugin["spec"]["platforms"]
    assert platform["uri"] == release.ARCHIVE_URL.format(v=__version__)
    assert platform["sha256"] == hashlib.sha256(release.plugin_archive(__version__)).hexdigest()


@pytest.mark.parametrize("prog", ["kubevirt-colocate", "kubectl colocate"])
@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_the_command_line_says_its_version(capsys, prog, flag):
    with pytest.raises(SystemExit) as done:
        main([flag], prog=prog)
    assert done.value.code == 0
    assert capsys.readouterr().out == f"{prog} {__version__}\n"


# --------------------------------------------------------------------------- krew's manifest rules

SAFE_NAME = re.compile(r"^[\w-]+$")  # krew pkg/index/validation: IsSafePluginName
SHA256 = re.compile(r"^[a-f0-9]{64}$")
SEMVER_V = re.compile(r"^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")


def krew_problems(name: str, plugin: dict[str, Any]) -> list[str]:
    """What krew's ValidatePlugin (and validatePlatform, validateFiles, validateSelector) refuses."""
    found = []
    spec = plugin.get("spec") or {}
    if plugin.get("apiVersion") != "krew.googlecontainertools.github.com/v1alpha2":
        found.append("apiVersion")
    if plugin.get("kind") != "Plugin":
        found.append("kind")
    if not SAFE_NAME.match(name) or (plugin.get("metadata") or {}).get("name") != name:
        found.append("name")
    if not spec.get("shortDescription"):
        found.append("shortDescription")
    if not SEMVER_V.match(str(spec.get("version", ""))):
        found.append("version")
    if not spec.get("platforms"):
        found.append("platforms")
    for platform in spec.get("platforms") or []:
        if not platform.get("uri"):
            found.append("uri")
        if not SHA256.match(str(platform.get("sha256", ""))):
            found.append("sha256")
        if not platform.get("bin"):
            found.append("bin")
        files = platform.get("files")
        if files is not None and (not files or any(not f.get("from") or not f.get("to") for f in files)):
            found.append("files")
        selector = platform.get("selector")
        keys = list((selector or {}).get("matchLabels") or {}) + [e.get("key") for e in (selector or {}).get("matchExpressions") or []]
        if not selector or not keys or any(k not in ("os", "arch") for k in keys):
            found.append("selector")
    return found


def test_the_krew_manifest_is_one_krew_accepts_and_installs_what_it_names():
    plugin = yaml.safe_load(MANIFEST.read_text())
    assert krew_problems(MANIFEST.stem, plugin) == []
    # The archive holds every file the manifest copies, the launcher among them, executable.
    [platform] = plugin["spec"]["platforms"]
    with tarfile.open(fileobj=io.BytesIO(release.plugin_archive(__version__))) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert {f["from"] for f in platform["files"]} <= set(members)
        assert members[platform["bin"]].mode & 0o111
        launcher = tar.extractfile(platform["bin"]).read().decode()
    assert f'version="{__version__}"' in launcher and "@VERSION@" not in launcher


@pytest.mark.parametrize("broken, problem", [
    ({"spec": {"version": "0.1.0"}}, "version"),
    ({"metadata": {"name": "other"}}, "name"),
    ({"spec": {"platforms": [{"uri": "u", "sha256": "0" * 63, "bin": "b", "selector": {"matchLabels": {"os": "linux"}}}]}},
     "sha256"),
    ({"spec": {"platforms": [{"uri": "u", "sha256": "0" * 64, "bin": "b", "selector": {"matchLabels": {"cpu": "x"}}}]}},
     "selector"),
    ({"spec": {"platforms": []}}, "platforms"),
])
def test_the_krew_rules_refuse_what_krew_refuses(broken, problem):
    plugin = yaml.safe_load(MANIFEST.read_text())
    for part, fields in broken.items():
        plugin[part] = {**plugin[part], **fields}
    assert problem in krew_problems(MANIFEST.stem, plugin)


# --------------------------------------------------------------------------- make release

RELEASED = ["webhook", "pyproject.toml", "charts", "manifests/base/kustomization.yaml", "README.md", "plugins",
            "LICENSE", "CHANGELOG.md", "hack"]


@pytest.fixture
def scratch(tmp_path) -> Path:
    """The files a release reads and writes, in a copy of the tree."""
    for name in RELEASED:
        source, target = ROOT / name, tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, target)
    return tmp_path


def run_release(tree: Path, version: str) -> subprocess.CompletedProcess[str]:
    from tests.support.helm import sdk

    sdk()  # skipped without helm-sdkpy, failed so in CI
    return subprocess.run([sys.executable, str(tree / "hack" / "release.py"), version], cwd=tree,
                          capture_output=True, text=True, timeout=120)


def test_a_release_needs_its_changelog_section(scratch):
    done = run_release(scratch, "9.9.9")
    assert done.returncode == 2 and "CHANGELOG.md has no section for 9.9.9" in done.stderr
    assert (scratch / "webhook" / "__init__.py").read_text() == (ROOT / "webhook" / "__init__.py").read_text()


def test_a_release_sets_the_version_everywhere_and_packages_the_chart(scratch):
    # What an older checkout's build left (the emulator was packaged once): it must not reach the wheel.
    (scratch / "build" / "lib" / "kubefake").mkdir(parents=True)
    (scratch / "build" / "lib" / "kubefake" / "__init__.py").write_text("")
    changelog = scratch / "CHANGELOG.md"
    changelog.write_text(changelog.read_text().replace("## [Unreleased]", "## [Unreleased]\n\n## [0.1.1] - 2026-12-01", 1))
    done = run_release(scratch, "0.1.1")
    assert done.returncode == 0, done.stderr
    assert '__version__ = "0.1.1"' in (scratch / "webhook" / "__init__.py").read_text()
    chart = yaml.safe_load((scratch / "charts" / "kubevirt-colocate" / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == ("0.1.1", "0.1.1")
    packaged = scratch / "dist" / "kubevirt-colocate-0.1.1.tgz"
    with tarfile.open(packaged) as tar:
        assert yaml.safe_load(tar.extractfile("kubevirt-colocate/Chart.yaml"))["version"] == "0.1.1"
    plugin = yaml.safe_load((scratch / "plugins" / "colocate.yaml").read_text())
    archive = (scratch / "dist" / "kubectl-colocate-v0.1.1.tar.gz").read_bytes()
    assert plugin["spec"]["version"] == "v0.1.1" and plugin["spec"]["platforms"][0]["sha256"] == hashlib.sha256(archive).hexdigest()
    assert "kubevirt-colocate:0.1.1" in (scratch / "README.md").read_text()
    assert "releases/download/v0.1.1/kubevirt_colocate-0.1.1-py3-none-any.whl" in (scratch / "README.md").read_text()
    assert "docker build -t registry.example.com/kubevirt-colocate:0.1.1 ." in done.stdout
    # The Python packages, of the same version: the wheel the launcher installs, and the sdist.
    with zipfile.ZipFile(scratch / "dist" / "kubevirt_colocate-0.1.1-py3-none-any.whl") as wheel:
        assert "Version: 0.1.1" in wheel.read("kubevirt_colocate-0.1.1.dist-info/METADATA").decode().splitlines()
        assert '__version__ = "0.1.1"' in wheel.read("webhook/__init__.py").decode()
    assert top_level(scratch / "dist" / "kubevirt_colocate-0.1.1-py3-none-any.whl") == {"webhook"}
    with tarfile.open(scratch / "dist" / "kubevirt_colocate-0.1.1.tar.gz") as sdist:
        assert "kubevirt_colocate-0.1.1/pyproject.toml" in sdist.getnames()
    with tarfile.open(scratch / "dist" / "kubectl-colocate-v0.1.1.tar.gz") as tar:
        launcher = tar.extractfile("kubectl-colocate").read().decode()
    assert f'wheel="${{KUBECTL_COLOCATE_WHEEL:-{release.WHEEL_URL.format(v="0.1.1")}}}"' in launcher


def top_level(wheel: Path) -> set[str]:
    """The top-level names a wheel installs into site-packages (its RECORD), its metadata left out."""
    with zipfile.ZipFile(wheel) as archive:
        [record] = [name for name in archive.namelist() if name.endswith(".dist-info/RECORD")]
        paths = [line.split(",")[0] for line in archive.read(record).decode().splitlines() if line]
    return {path.split("/")[0].removesuffix(".py") for path in paths if ".dist-info/" not in path}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel a release builds of this tree (PEP 517, setuptools; from its sdist, as hack/release.py does)."""
    dist = tmp_path_factory.mktemp("dist")
    built = subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    [found] = dist.glob(f"kubevirt_colocate-{__version__}-*.whl")
    return found


def test_the_wheel_ships_the_product_alone(wheel):
    """`webhook` and nothing else: the tests' emulator (kubefake), the benchmark and the tests stay in
    the source tree (they import from its root), so an install never holds a package that cannot import."""
    assert top_level(wheel) == {"webhook"}


def test_the_launcher_installs_the_released_wheel_into_a_fresh_venv_that_runs_both_commands(tmp_path, wheel):
    """What krew installs, run as kubectl runs it: on first use the launcher makes its virtualenv and
    installs the release's wheel (here the one just built; a release names it by its address)."""
    plugin = tmp_path / "krew"
    with tarfile.open(fileobj=io.BytesIO(release.plugin_archive(__version__))) as tar:
        tar.extractall(plugin, filter="data")
    env = {**{k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}, "KUBECTL_COLOCATE_WHEEL": str(wheel),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    first = subprocess.run([str(plugin / "kubectl-colocate"), "--help"], capture_output=True, text=True, env=env,
                           timeout=600)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("usage: kubectl colocate") and "installing kubevirt-colocate" in first.stderr
    venv = plugin / f"venv-{__version__}"
    version = subprocess.run([str(venv / "bin" / "kubevirt-colocate"), "--version"], capture_output=True, text=True,
                             timeout=60)
    assert version.stdout == f"kubevirt-colocate {__version__}\n", version.stderr
    again = subprocess.run([str(plugin / "kubectl-colocate"), "status", "--help"], capture_output=True, text=True,
                           env=env, timeout=60)
    assert again.returncode == 0 and "--context" in again.stdout and again.stderr == ""  # installed once
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import webhook; print(webhook.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert where.stdout.startswith(str(venv)), where.stdout  # the wheel's code, not this checkout's
    emulator = subprocess.run([str(venv / "bin" / "python"), "-c", "import kubefake"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
    assert "No module named 'kubefake'" in emulator.stderr  # the tests' emulator is not installed


def test_the_charts_notes_say_where_the_command_line_comes_from():
    notes = (ROOT / "charts" / "kubevirt-colocate" / "templates" / "NOTES.txt").read_text()
    assert release.WHEEL_URL.format(v="{{ .Chart.AppVersion }}") in notes
    assert "kubectl krew install --manifest" in notes
