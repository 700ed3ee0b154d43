"""The command line (its verbs: parser.py's DESCRIPTION); one module per verb or two, parser.py the flags."""
from __future__ import annotations

import argparse
import asyncio
import sys

import yaml

from ..cluster.client import KubeError, NoCredentials
from ..config import EXPLAIN, KEEP, REVIEW, SERVE, SPARE_VMS, STATUS
from .parser import DEFAULT_CERT_DIR, build_parser, flags_given, settings_from

__all__ = ["DEFAULT_CERT_DIR", "build_parser", "flags_given", "main", "plugin", "settings_from"]


def plugin() -> int:
    """`kubectl colocate ...`: kubectl runs `kubectl-colocate` from PATH with the rest of its arguments."""
    return main(prog="kubectl colocate")


def main(argv: list[str] | None = None, prog: str = "kubevirt-colocate") -> int:
    parser = build_parser(prog)
    if argv is None:  # shell completion, when the shell asks (docs/operations.md, Shell completion): it answers, exits
        try:
            import argcomplete  # PYTHON_ARGCOMPLETE_OK: the marker argcomplete's global completion looks for
        except ImportError:  # the `completion` extra is not installed: no completion
            pass
        else:
            argcomplete.autocomplete(parser)
    words = sys.argv[1:] if argv is None else argv
    ours = {name for action in parser.flags for name in action.option_strings}
    if words and words[0].startswith("-") and words[0].partition("=")[0] not in ours:
        parser.error(f"unrecognized arguments: {words[0]}")  # not "the verb is required"
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        args.verb_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return run(args)
    except (NoCredentials, OSError, ValueError, yaml.YAMLError, KubeError) as exc:
        # On one line: a YAML reader's error spans several.
        print(f"error: {' '.join(str(exc).split()) or type(exc).__name__}", file=sys.stderr)
        return 1 if isinstance(exc, KubeError) else 2  # the cluster refused: not the input's fault


def run(args: argparse.Namespace) -> int:
    """The verb, on an event loop of its own (uvloop's, when installed, for the two that serve);
    each role's process imports its own package alone."""
    from .certs import run_certs, run_spare

    if args.verb in (SERVE, KEEP):
        from ..process.loop import new_event_loop

        if args.verb == SERVE:
            from .serve import run_serve as role
        else:
            from .keep import run_keep as role
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            return runner.run(role(args))
    if args.verb in (REVIEW, EXPLAIN, STATUS):
        from ..stores.store import StoreError
        from .report import run_explain, run_status
        from .review import run_review

        verb = {REVIEW: run_review, EXPLAIN: run_explain, STATUS: run_status}[args.verb]
        try:
            return asyncio.run(verb(args))
        except StoreError as exc:  # a read of the cluster failed: the cluster's doing, not the input's
            raise KubeError(f"cannot read the cluster: {exc}") from None
    return run_certs(args) if args.verb == "certs" else run_spare(args) if args.verb == SPARE_VMS else 2
