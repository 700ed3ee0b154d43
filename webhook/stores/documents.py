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


def read(path: str | None, shown: str) -> list[Any]:
    """The documents of file `path` (None: stdin), empty ones left out: one JSON document, else a YAML stream;
    a ValueError naming it (`shown`) and what is wrong."""
    try:
        text = sys.stdin.read() if path is None else Path(path).read_text(encoding="utf-8")
        if text.lstrip()[:1] in ("{", "["):
            try:
                return [orjson.loads(text)]
            except orjson.JSONDecodeError as exc:  # else YAML: its flow style, comments, several documents
                if "depth" in str(exc) or "recursion" in str(exc).lower():
                    raise ValueError(TOO_DEEP) from None
        return [d for d in yaml.load_all(text, Loader=LOADER) if d is not None]
    except (RecursionError, yaml.YAMLError) as exc:
        if isinstance(exc, RecursionError) or "nesting depth" in str(getattr(exc, "problem", "")):
            raise ValueError(f"{shown}: {TOO_DEEP}") from None
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
