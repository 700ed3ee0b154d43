"""The image: the Dockerfile, and its dependencies (requirements/image.txt, `make lock`)
against pyproject.toml.

The image installs the lock alone (`--require-hashes --no-deps`), so a dependency added to
pyproject.toml and not locked would be missing from the image, and one dropped from
pyproject.toml and still locked would ship for nothing. Nothing here reaches the network.
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).parent.parent
LOCK = ROOT / "requirements" / "image.txt"
DOCKERFILE = ROOT / "Dockerfile"
PROJECT = "kubevirt-colocate (pyproject.toml)"  # how uv and pip-compile name the project in `# via`


@dataclass
class Pin:
    version: str
    marker: str | None
    hashes: int = 0
    via: set[str] = field(default_factory=set)


def read_lock(text: str) -> dict[str, Pin]:
    """name (PEP 503) -> its pin, hashes and `# via` names, from pip-compile or uv's output."""
    pins: dict[str, Pin] = {}
    current: Pin | None = None
    via_list = False
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or line.startswith("#"):  # the header
            continue
        if not line[0].isspace():
            requirement = Requirement(line.rstrip("\\ "))
            specifiers = list(requirement.specifier)
            assert len(specifiers) == 1 and specifiers[0].operator == "==", f"not pinned: {line}"
            current = pins[canonicalize_name(requirement.name)] = Pin(
                specifiers[0].version, str(requirement.marker) if requirement.marker else None)
            via_list = False
        elif current is None:
            raise AssertionError(f"outside a requirement: {line}")
        elif stripped.startswith("--hash="):
            current.hashes += 1
        elif stripped == "# via":
            via_list = True
        elif stripped.startswith("# via "):
            current.via.add(stripped.removeprefix("# via ").strip())
        elif via_list and stripped.startswith("#   "):
            current.via.add(stripped.removeprefix("#   ").strip())
    return pins


# The image: CPython 3.12 on Linux (x86_64 or arm64), as the Dockerfile's base.
IMAGE_MARKERS = {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
                 "implementation_name": "cpython", "platform_python_implementation": "CPython",
                 "python_version": "3.12", "python_full_version": "3.12.0"}


def in_the_image(requirement: Requirement) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({**IMAGE_MARKERS, "platform_machine": machine})
               for machine in ("x86_64", "aarch64"))


def disagreements(pyproject: str, lock: str) -> list[str]:
    """Each way pyproject.toml's dependencies and the lock differ, in words."""
    wanted = [Requirement(text) for text in tomllib.loads(pyproject)["project"]["dependencies"]]
    direct = {canonicalize_name(r.name): r for r in wanted}
    pins = read_lock(lock)
    found = []
    for name, requirement in direct.items():
        if not in_the_image(requirement):
            continue
        pin = pins.get(name)
        if pin is None:
            found.append(f"{requirement} is a dependency in pyproject.toml and not in the lock")
        elif not requirement.specifier.contains(Version(pin.version), prereleases=True):
            found.append(f"the lock pins {name}=={pin.version}, pyproject.toml asks for {requirement}")
    for name, pin in pins.items():
        if PROJECT in pin.via and name not in direct:
            found.append(f"the lock has {name} from pyproject.toml, which no longer depends on it")
        if not pin.via:
            found.append(f"nothing in the lock says why {name} is there")
        if not pin.hashes:
            found.append(f"{name} has no hash in the lock")
        for parent in pin.via - {PROJECT}:
            if canonicalize_name(parent) not in pins:
                found.append(f"the lock has {name} for {parent}, which it does not pin")
    return found


PYPROJECT_TEXT = (ROOT / "pyproject.toml").read_text()


def test_the_lock_pins_exactly_the_dependencies_of_pyproject_with_hashes():
    assert disagreements(PYPROJECT_TEXT, LOCK.read_text()) == []


def test_the_lock_is_for_the_python_of_the_image():
    header = re.search(r"--python-version (\d+\.\d+)", LOCK.read_text())
    base = re.search(r"(?m)^ARG PYTHON_IMAGE=python:(\d+\.\d+)-slim$", DOCKERFILE.read_text())
    assert header and base and header.group(1) == base.group(1)


# The check itself, on edited copies: each way the two files can drift apart is caught.

def with_dependencies(edit) -> str:
    data = tomllib.loads(PYPROJECT_TEXT)
    dependencies = edit(list(data["project"]["dependencies"]))
    return "[project]\ndependencies = [\n" + "".join(f"    {d!r},\n" for d in dependencies) + "]\n"


def without(name: str):
    return lambda deps: [d for d in deps if canonicalize_name(Requirement(d).name) != name]


def lock_without(name: str, what: str = "pin"):
    """The lock with `name`'s whole entry, or only its hashes, taken out."""
    def edit(text: str) -> str:
        blocks = re.split(r"(?m)^(?=\S)", text)  # the header, then one block per pin
        out = []
        for block in blocks:
            if block.startswith(f"{name}=="):
                if what == "pin":
                    continue
                block = re.sub(r"(?m)^ +--hash=.*\n", "", block).replace(" \\\n", "\n", 1)
            out.append(block)
        return "".join(out)
    return edit


def unchanged(text: str) -> str:
    return text


@pytest.mark.parametrize("pyproject, edit_lock, complaint", [
    pytest.param(with_dependencies(lambda deps: deps + ["httpx>=0.27"]), unchanged,
                 "httpx>=0.27 is a dependency in pyproject.toml and not in the lock", id="added-to-pyproject"),
    pytest.param(with_dependencies(without("orjson")), unchanged,
                 "the lock has orjson from pyproject.toml, which no longer depends on it", id="dropped-from-pyproject"),
    pytest.param(with_dependencies(lambda deps: [*without("pyyaml")(deps), "PyYAML>=99"]), unchanged,
                 "pyproject.toml asks for PyYAML>=99", id="pin-outside-the-range"),
    pytest.param(PYPROJECT_TEXT, lock_without("orjson"),
                 "orjson>=3.9 is a dependency in pyproject.toml and not in the lock", id="dropped-from-lock"),
    pytest.param(PYPROJECT_TEXT, lock_without("cffi"),
                 "the lock has pycparser for cffi, which it does not pin", id="parent-dropped-from-lock"),
    pytest.param(PYPROJECT_TEXT, lock_without("six", "hashes"), "six has no hash in the lock", id="hashes-removed"),
])
def test_a_lock_that_disagrees_with_pyproject_is_caught(pyproject, edit_lock, complaint):
    found = disagreements(pyproject, edit_lock(LOCK.read_text()))
    assert any(complaint in f for f in found), found


def test_a_dependency_only_for_another_platform_needs_no_pin():
    pyproject = with_dependencies(lambda deps: deps + ["pywin32>=306; sys_platform == 'win32'"])
    assert disagreements(pyproject, LOCK.read_text()) == []


def test_the_build_backend_floor_reads_the_license_as_pyproject_writes_it():
    data = tomllib.loads(PYPROJECT_TEXT)
    backend = next(Requirement(r) for r in data["build-system"]["requires"] if Requirement(r).name == "setuptools")
    if isinstance(data["project"].get("license"), str):  # an SPDX expression: setuptools 77 and later
        assert not backend.specifier.contains("76.1.0") and backend.specifier.contains("77.0.3"), backend


# --------------------------------------------------------------------------- the Dockerfile


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments left out."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    return [(line.split(None, 1)[0].upper(), " ".join(line.split()[1:])) for line in joined.splitlines() if line.strip()]


def stages() -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for instruction in instructions(DOCKERFILE.read_text()):
        if instruction[0] == "FROM":
            found.append([])
        if found:
            found[-1].append(instruction)
    return found


def test_the_base_is_a_slim_python_by_tag_and_can_be_pinned_by_build_argument():
    text = DOCKERFILE.read_text()
    assert re.search(r"(?m)^ARG PYTHON_IMAGE=python:3\.\d+-slim$", text)  # a tag; a digest comes as --build-arg
    assert re.search(r"--build-arg PYTHON_IMAGE=python:3\.\d+-slim@sha256:", text)
    assert [stage[0][1].split()[0] for stage in stages()] == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]


def test_the_image_installs_only_the_locked_hashed_dependencies_and_the_project_without_its_own():
    build = stages()[0]
    runs = [args for name, args in build if name == "RUN"]
    installs = [cmd for run in runs for cmd in run.split("&&") if re.search(r"\bpip\b.* install\b", cmd)]
    assert len(installs) == 2
    locked, project = installs
    assert re.search(r"--require-hashes\b", locked) and "--no-deps" in locked and "-r /tmp/image.txt" in locked
    assert ("COPY", "requirements/image.txt /tmp/image.txt") in build
    assert "--no-deps" in project and re.search(r"\.whl\b", project)
    # A dependency the lock missed fails the build (pip check).
    commands = [cmd.strip() for run in runs for cmd in run.split("&&")]
    assert "pip --python /opt/venv/bin/python check" in commands
    # Wheels are built for the project alone; its dependencies only ever come from the lock.
    assert all("--no-deps" in cmd for run in runs for cmd in run.split("&&") if re.search(r"\bpip\b.* wheel\b", cmd))


def test_the_runtime_stage_copies_the_installed_tree_only_without_pip_runs_non_root_and_has_a_home():
    final = stages()[-1]
    copies = [args for name, args in final if name in ("COPY", "ADD")]
    assert copies == ["--from=build /opt/venv /opt/venv"]  # no wheels left behind in a layer
    runs = " ".join(args for name, args in final if name == "RUN")
    assert "pip install" not in runs
    for gone in ('"$stdlib/ensurepip"', '"$site"/pip ', "/usr/local/bin/pip*"):
        assert gone in runs
    env = " ".join(args for name, args in final if name == "ENV")
    assert re.search(r"\bPATH=/opt/venv/bin:", env) and re.search(r"\bHOME=/\S*", env)
    user = [args for name, args in final if name == "USER"]
    assert len(user) == 1 and re.fullmatch(r"(\d+)(:\d+)?", user[0]) and int(user[0].split(":")[0]) != 0
    assert ("ENTRYPOINT", '["python", "-m", "webhook", "serve"]') in final
    assert not re.search(r"\b(apt-get|gcc|build-essential)\b", runs)


def test_the_build_context_keeps_what_the_dockerfile_copies_and_leaves_out_keys():
    ignored = [line.strip().rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    assert "certs" in ignored and ".git" in ignored
    sources = [path for stage in stages() for name, args in stage if name == "COPY" and "--from=" not in args
               for path in args.split()[:-1]]
    assert sources and all((ROOT / path).exists() for path in sources)
    for path in sources:
        parts = Path(path).parts
        assert not any(pattern in (parts[0], path) or Path(path).match(pattern) for pattern in ignored), path



def test_the_image_builds_its_wheel_from_webhook_alone():
    """The project's source in the image is the package and what its metadata reads: never the
    tests' emulator (kubefake/), the benchmark or the tests."""
    sources = {path for stage in stages() for name, args in stage if name == "COPY" and "--from=" not in args
               for path in args.split()[:-1]}
    assert sources == {"requirements/image.txt", "pyproject.toml", "README.md", "webhook"}
