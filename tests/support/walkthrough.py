"""A doc's code, followed as a reader follows it: each Python block of a markdown file says which
file it goes into, and before which line, in a marker right before it

    <!-- code: webhook/rules/keeping/keep.py, before: Check(hold=Alone.NOT_RUNNING, -->

and the doc names the tests to run after (`python -m pytest ...` in a code block). `follow` makes
those edits in a copy of the tree and runs those tests there, in a process of their own.
"""
from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import docs
from tests.support.docs import ROOT

MARKER = re.compile(r"^<!--\s*code:\s*(?P<path>[^,]+?),\s*before:\s*(?P<before>.*?)\s*-->$")
# What the tests of a hold or a rule need of the tree: the package, the tests, the emulator, the pytest settings.
TREE = ("webhook", "tests", "kubefake", "pyproject.toml")


@dataclasses.dataclass(frozen=True)
class Edit:
    """One block of the doc: the file it goes into, the line it goes before, its text."""

    path: str
    before: str
    text: str
    where: str


def edits(doc: Path) -> list[Edit]:
    """The doc's Python blocks, in order; a block without its marker raises (a reader would not know where it goes)."""
    lines = doc.read_text().splitlines()
    found = []
    for block in docs.blocks(doc):
        if block.lang != "python":
            continue
        marker = MARKER.match(lines[block.line - 2].strip()) if block.line >= 2 else None
        if marker is None:
            raise ValueError(f"{block.where}: a Python block without `<!-- code: PATH, before: LINE -->` before it")
        found.append(Edit(path=marker["path"], before=marker["before"], text=block.text, where=block.where))
    return found


def tests_named(doc: Path) -> list[tuple[str, ...]]:
    """The `python -m pytest ...` commands of the doc's code blocks, as words."""
    return [tuple(line.split()) for block in docs.blocks(doc) if block.lang in ("", "sh", "shell", "bash", "console")
            for line in block.text.splitlines() if line.startswith("python -m pytest ")]


def apply(edit: Edit, tree: Path, names: dict[str, str]) -> None:
    """The block, its names changed as `names` says, inserted into its file before its line (one such line)."""
    target = tree / edit.path
    lines = target.read_text().splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if line.strip() == edit.before]
    if len(at) != 1:
        raise ValueError(f"{edit.where}: {edit.path} has {len(at)} lines `{edit.before}`, not one")
    text = edit.text
    for old, new in names.items():
        text = text.replace(old, new)
    target.write_text("".join(lines[:at[0]]) + text + "".join(lines[at[0]:]))


def follow(doc: Path, where: Path, names: dict[str, str]) -> list[subprocess.CompletedProcess[str]]:
    """A copy of the tree in `where` with the doc's blocks applied, and each test command the doc
    names run there (the copy's code, not this checkout's): their results."""
    tree = where / "tree"
    for name in TREE:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, tree / name)
    for edit in edits(doc):
        apply(edit, tree, names)
    commands = tests_named(doc)
    if not commands:
        raise ValueError(f"{docs.shown(doc)}: names no tests to run (`python -m pytest ...`)")
    return [subprocess.run([sys.executable, *words[1:], "-p", "no:cacheprovider", f"--basetemp={where / 'basetemp'}"],
                           cwd=tree, capture_output=True, text=True, timeout=300) for words in commands]
