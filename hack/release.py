"""`make release VERSION=x.y.z`: set the version everywhere it is written, build the Python wheel and
sdist, package the chart and the kubectl plugin's archive, and print the image's build command.
Pushes nothing.

The version is set once, in webhook/__init__.py; pyproject.toml reads it from there. What cannot
read it is written here and held to it by tests/test_release.py: the chart's version and
appVersion (the default image tag), the kustomize install's image tag, the README's examples, and
the krew manifest (version, archive address and sha256).
"""
from __future__ import annotations

import argparse
import asyncio
import gzip
import hashlib
import io
import re
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEMVER = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?")
IMAGE = "registry.example.com/kubevirt-colocate"
RELEASES = "https://github.com/kubevirt-colocate/kubevirt-colocate/releases/download/v{v}/"
ARCHIVE_URL = RELEASES + "kubectl-colocate-v{v}.tar.gz"
# The wheel the release uploads beside the plugin's archive: what the krew launcher installs, by address.
WHEEL = "kubevirt_colocate-{v}-py3-none-any.whl"
WHEEL_URL = RELEASES + WHEEL


def current() -> str:
    found = re.search(r'^__version__ = "([^"]+)"$', (ROOT / "webhook" / "__init__.py").read_text(), re.M)
    assert found, "webhook/__init__.py has no __version__"
    return found[1]


def changelog_has(version: str) -> bool:
    """Keep a Changelog: a `## [x.y.z] - YYYY-MM-DD` section."""
    text = (ROOT / "CHANGELOG.md").read_text()
    return re.search(rf"^## \[{re.escape(version)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", text, re.M) is not None


def plugin_archive(version: str) -> bytes:
    """The krew archive: the launcher (its version filled in) and the license, byte for byte the
    same for the same tree (no times, owners or modes of the machine that builds it)."""
    launcher = (ROOT / "plugins" / "kubectl-colocate").read_text().replace("@VERSION@", version) \
        .replace("@WHEEL_URL@", WHEEL_URL.format(v=version)).encode()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, mode in (("kubectl-colocate", launcher, 0o755), ("LICENSE", (ROOT / "LICENSE").read_bytes(), 0o644)):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime, info.uname, info.gname = len(data), mode, 0, "root", "root"
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def substitute(path: Path, pattern: str, replacement: str, count: int = 0) -> None:
    text = path.read_text()
    new, n = re.subn(pattern, replacement, text, count=count, flags=re.M)
    if n == 0:
        raise SystemExit(f"release: {path.relative_to(ROOT)} has nothing matching {pattern!r}")
    path.write_text(new)


def write_version(version: str, sha256: str) -> None:
    substitute(ROOT / "webhook" / "__init__.py", r'^__version__ = "[^"]+"$', f'__version__ = "{version}"')
    chart = ROOT / "charts" / "kubevirt-colocate" / "Chart.yaml"
    substitute(chart, r"^version: .+$", f"version: {version}")
    substitute(chart, r"^appVersion: .+$", f'appVersion: "{version}"')
    substitute(ROOT / "manifests" / "base" / "kustomization.yaml", r"^(  newTag: ).+$", rf"\g<1>{version}")
    readme = ROOT / "README.md"
    substitute(readme, r"(kubevirt-colocate:)\d+\.\d+\.\d+\S*?(?=[\s`)])", rf"\g<1>{version}")
    substitute(readme, r"(newTag: )\d+\.\d+\.\d+\S*?(?=\})", rf"\g<1>{version}")
    substitute(readme, r"releases/download/v[^/\s]+/kubevirt_colocate-[^-\s]+-py3",
               f"releases/download/v{version}/kubevirt_colocate-{version}-py3")
    manifest = ROOT / "plugins" / "colocate.yaml"
    substitute(manifest, r"^(  version: )v.+$", rf"\g<1>v{version}")
    substitute(manifest, r"^(    uri: ).+$", rf"\g<1>{ARCHIVE_URL.format(v=version)}")
    substitute(manifest, r"^(    sha256: ).+$", rf"\g<1>{sha256}")


async def package_chart(dist: Path) -> str:
    import helm_sdkpy

    return await helm_sdkpy.Package(helm_sdkpy.Configuration()).run(str(ROOT / "charts" / "kubevirt-colocate"),
                                                                      dest_dir=str(dist))


def package_python(dist: Path, version: str) -> list[Path]:
    """The sdist, and the wheel built from it, by `build` (PEP 517, setuptools in an isolated
    environment): from the sdist, so that nothing a checkout's build/ kept from before reaches the wheel."""
    done = subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)],
                          capture_output=True, text=True)
    built = [dist / WHEEL.format(v=version), dist / f"kubevirt_colocate-{version}.tar.gz"]
    if done.returncode != 0 or not all(path.is_file() for path in built):
        said = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"release: the Python packages were not built (python -m build: {said})")
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make release", description=__doc__.split("\n\n")[0])
    parser.add_argument("version", metavar="VERSION", help="x.y.z (semantic versioning, no leading v)")
    parser.add_argument("--dist", default=str(ROOT / "dist"), help="where the chart and the plugin's archive go")
    args = parser.parse_args(argv)
    version = args.version
    if not SEMVER.fullmatch(version):
        print(f"release: {version!r} is not a version x.y.z", file=sys.stderr)
        return 2
    if not changelog_has(version):
        print(f"release: CHANGELOG.md has no section for {version}: add `## [{version}] - YYYY-MM-DD` "
              "with what changed, then run this again", file=sys.stderr)
        return 2
    before = current()
    dist = Path(args.dist)
    dist.mkdir(parents=True, exist_ok=True)
    archive = plugin_archive(version)
    (dist / f"kubectl-colocate-v{version}.tar.gz").write_bytes(archive)
    write_version(version, hashlib.sha256(archive).hexdigest())
    wheel, sdist = package_python(dist, version)
    chart = asyncio.run(package_chart(dist))
    print(f"version {version} (was {before}) written to webhook/__init__.py, Chart.yaml, "
          "manifests/base/kustomization.yaml, README.md and plugins/colocate.yaml")
    print(f"python: {wheel} (upload to {WHEEL_URL.format(v=version)}), {sdist}")
    print(f"chart:  {chart}")
    print(f"plugin: {dist / f'kubectl-colocate-v{version}.tar.gz'} (upload to {ARCHIVE_URL.format(v=version)})")
    print(f"image:  docker build -t {IMAGE}:{version} .    # then push it to your registry")
    return 0


if __name__ == "__main__":
    sys.exit(main())
