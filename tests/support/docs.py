"""The commands and YAML snippets of the project's markdown (README.md, docs/), as a reader finds them.

A command is a line of a code block (fenced or indented) that starts with one of `PROGRAMS`, or
with `$ ` before one (then only those lines are commands, the rest is output), or a code span of
the text that starts with one. Shell around it is cut away: a pipe's, `&&`'s or `;`'s other
commands, redirections, comments; a heredoc becomes the command's stdin. A block preceded by
`<!-- live cluster: WHY -->` needs a cluster the tests do not have, and says why.
"""
from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ("kubectl", "helm", "kubevirt-colocate", "make")
MARKER = re.compile(r"^\s*<!--\s*live cluster:\s*(.*?)\s*-->\s*$")
SEPARATORS = {"|", "||", "&&", ";", "&"}
REDIRECTIONS = {">", ">>", "<", "2>", "<<"}


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclasses.dataclass(frozen=True)
class Block:
    """A code block: where it is, its language (fenced: the info string; indented: ""), its text."""

    path: Path
    line: int
    lang: str
    text: str
    live: str | None  # why it needs a live cluster, when marked so

    @property
    def where(self) -> str:
        return f"{shown(self.path)}:{self.line}"


@dataclasses.dataclass(frozen=True)
class Command:
    """One command as a shell would run it: its words, its stdin (a heredoc) and where it is written."""

    words: tuple[str, ...]
    where: str
    stdin: str | None = None
    live: str | None = None
    inline: bool = False

    @property
    def line(self) -> str:
        return " ".join(self.words)


def blocks(path: Path) -> list[Block]:
    """Every fenced and indented code block of a markdown file, in order."""
    lines, found, i = path.read_text().splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            body, lang, start, i = lines[i + 1:end], line[3:].strip(), i, end + 1
        elif line.startswith("    ") and line.strip() and (i == 0 or not lines[i - 1].strip()):
            end = i
            while end < len(lines) and (lines[end].startswith("    ") or (
                    not lines[end].strip() and end + 1 < len(lines) and lines[end + 1].startswith("    "))):
                end += 1
            body, lang, start, i = [text[4:] for text in lines[i:end]], "", i, end
        else:
            i += 1
            continue
        before = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(before)
        found.append(Block(path=path, line=start + 1, lang=lang, text="\n".join(body) + "\n",
                           live=marker[1] if marker else None))
    return found


def commands_of(block: Block) -> list[Command]:
    """The commands of a code block (none in a YAML or JSON block)."""
    if block.lang not in ("", "sh", "shell", "bash", "console"):
        return []
    lines = re.sub(r"\\\n\s*", " ", block.text).splitlines()
    prompted = any(line.startswith("$ ") for line in lines)
    found, i = [], 0
    while i < len(lines):
        line, i = lines[i], i + 1
        if prompted and not line.startswith("$ "):
            continue
        line = line.removeprefix("$ ")
        stdin = None
        heredoc = re.search(r"<<-?\s*'?(\w+)'?", line)
        if heredoc:
            end = next(j for j in range(i, len(lines)) if lines[j].strip() == heredoc[1])
            stdin, i = "\n".join(lines[i:end]) + "\n", end + 1
        found += [Command(words=words, where=block.where, stdin=stdin, live=block.live) for words in segments(line)]
    return found


def inline_commands(path: Path) -> list[Command]:
    """The commands written in the text as code spans (`kubectl get pods`), outside the code blocks."""
    text = path.read_text()
    for block in re.findall(r"^```.*?^```", text, re.S | re.M):
        text = text.replace(block, "\n" * block.count("\n"))
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for span in re.findall(r"`([^`]+)`", line):
            for words in segments(span):
                if len(words) < 2:  # a name (the namespace, the Deployment), not a command
                    continue
                found.append(Command(words=words, where=f"{shown(path)}:{number}", inline=True))
    return found


def segments(line: str) -> list[tuple[str, ...]]:
    """The commands of one shell line that run one of PROGRAMS, without the shell around them."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # an unfinished quote: prose, not a command
        return []
    found: list[tuple[str, ...]] = []
    current: list[str] = []
    skip = False
    for token in tokens + [";"]:
        if skip:
            skip = False
        elif token in SEPARATORS:
            if current and current[0] in PROGRAMS:
                found.append(tuple(current))
            current = []
        elif token in REDIRECTIONS or token.rstrip("0123456789") in REDIRECTIONS:
            skip = True
        else:
            current.append(token)
    return found


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a markdown file's headings (a repeated heading's with `-1`, `-2`, as GitHub numbers them)."""
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    found: set[str] = set()
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        name, n = slug(heading), 1
        while name in found:
            name, n = f"{slug(heading)}-{n}", n + 1
        found.add(name)
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of each link of a markdown file to a file or an anchor of the project, outside code."""
    found = []
    text = re.sub(r"^```.*?^```", lambda m: "\n" * m[0].count("\n"), path.read_text(), flags=re.S | re.M)
    for number, line in enumerate(text.splitlines(), 1):
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if not re.match(r"[a-z]+:", target):
                found.append((number, target))
    return found
