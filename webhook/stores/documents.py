"""The YAML or JSON documents of a file (`review`'s request, a `--state` snapshot), nested no deeper
than the admission server reads a body (orjson's 1024 levels; libyaml's 999): never a RecursionError.
`read` names its file in a one-line ValueError."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson
import yaml

MAX_DEPTH = 1024  # orjson's: the admission server answers a deeper body 400 (admission/server.py)
TOO_DEEP = f"nested too deeply: the webhook reads at most {MAX_DEPTH} levels of JSON (999 of YAML), as it does a " \
           f"request's body"
# libyaml: fast, and its composer is not recursive in Python; PyYAML's own where it was built without.
LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def file_problem(exc: OSError) -> str:
    """What is wrong with a file, as a person says it: "a directory, not a file", "no such file"."""
    if isinstance(exc, IsADirectoryError):
        return "a directory, not a file"
    return "no such file" if isinstance(exc, FileNotFoundError) else (exc.strerror or str(exc)).lower()


def documents(text: str) -> list[Any]:
    """The documents in `text`, empty ones left out: one JSON document, else a YAML stream."""
    if text.lstrip()[:1] in ("{", "["):
        try:
            return [orjson.loads(text)]
        except orjson.JSONDecodeError as exc:
            if "depth" in str(exc) or "recursion" in str(exc).lower():
                raise ValueError(TOO_DEEP) from None
            # not JSON: YAML's flow style, comments, several documents
    try:
        return [d for d in yaml.load_all(text, Loader=LOADER) if d is not None]
    except RecursionError:
        raise ValueError(TOO_DEEP) from None
    except yaml.YAMLError as exc:
        if "nesting depth" in str(getattr(exc, "problem", "")):
            raise ValueError(TOO_DEEP) from None
        raise


def read(path: str | None, shown: str) -> list[Any]:
    """The documents of file `path` (None: stdin); a ValueError naming it (`shown`) and what is wrong."""
    try:
        return documents(sys.stdin.read() if path is None else Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        said = getattr(exc, "problem", None) or " ".join(str(exc).split())
        raise ValueError(f"{shown}: not YAML or JSON{at}: {said}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{shown}: not text (UTF-8)") from None
    except ValueError as exc:  # nested too deeply
        raise ValueError(f"{shown}: {exc}") from None
    except OSError as exc:  # a directory, no such file, no permission: in words, not errno's
        raise ValueError(f"{shown}: {file_problem(exc)}") from None
