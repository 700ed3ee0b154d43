"""`kubectl colocate <TAB>`: kubectl runs `kubectl_complete-colocate` from PATH with the words typed
after `kubectl colocate` (the last one being completed) and reads cobra's answer: a candidate a line (a
tab, then its description), then `:DIRECTIVE`. The candidates come from the parser (parser.py)."""
from __future__ import annotations

import argparse
import sys

from .parser import Parser, build_parser

# cobra's ShellCompDirective: what the shell does besides the candidates.
FILES, NO_FILES, DIRECTORIES = 0, 4, 16
# The flags and arguments that name a file, and the one that names a directory.
FILE_VALUES = {"kubeconfig", "state", "tls_cert_file", "tls_key_file", "client_ca_file", "request"}
DIRECTORY_VALUES = {"out"}


def option(parser: Parser, name: str) -> argparse.Action | None:
    return next((action for action in parser.flags if name in action.option_strings), None)


def values(action: argparse.Action, partial: str, prefix: str = "") -> tuple[list[str], int]:
    """The values of a flag (or an argument) that begin with `partial`, or the shell's files."""
    if action.choices is not None:
        return [prefix + str(choice) for choice in action.choices if str(choice).startswith(partial)], NO_FILES
    if action.dest in DIRECTORY_VALUES:
        return [], DIRECTORIES
    return [], FILES if action.dest in FILE_VALUES else NO_FILES


def flags(parser: Parser, partial: str) -> tuple[list[str], int]:
    """The flags of `parser` that begin with `partial`; after `--flag=`, that flag's values."""
    name, equals, value = partial.partition("=")
    if equals:
        action = option(parser, name)
        return values(action, value, f"{name}=") if action is not None and action.nargs != 0 else ([], NO_FILES)
    return [name for action in parser.flags if action.help != argparse.SUPPRESS
            for name in action.option_strings if name.startswith(partial)], NO_FILES


def short(text: str, width: int = 72) -> str:
    """A verb's description as a completion menu shows it, on one line."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1].rsplit(" ", 1)[0] + "…"


def candidates(parser: Parser, words: list[str]) -> tuple[list[str], int]:
    """What may come in place of the last of `words` (the words after the command; the last one
    being typed, maybe empty), and cobra's directive for the shell."""
    *before, partial = words or [""]
    current, pending, taken = parser, None, 0
    for word in before:
        if pending is not None:
            pending = None
        elif word.startswith("-") and word != "-":
            action = option(current, word.partition("=")[0])
            pending = action if action is not None and action.nargs != 0 and "=" not in word else None
        elif current is parser and word in parser.verbs:
            current = parser.verbs[word]
        else:
            taken += 1
    if pending is not None:
        return values(pending, partial)
    if partial.startswith("-"):
        return flags(current, partial)
    if current is parser:
        return [f"{name}\t{short(verb.description or '')}" for name, verb in parser.verbs.items()
                if name.startswith(partial)], NO_FILES
    arguments = [action for action in current.flags if not action.option_strings]
    return values(arguments[taken], partial) if taken < len(arguments) else ([], NO_FILES)


def kubectl_complete(argv: list[str] | None = None) -> int:
    """`kubectl_complete-colocate`: kubectl passes the words alone, cobra's programs `__complete` first."""
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["__complete"]:
        words = words[1:]
    found, directive = candidates(build_parser("kubectl colocate"), words)
    print("\n".join([*found, f":{directive}"]))
    return 0
