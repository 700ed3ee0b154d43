"""`python -m webhook` and the `kubevirt-colocate` command: see webhook/cli/."""
import sys

from .cli import DEFAULT_CERT_DIR, build_parser, flags_given, main, plugin, settings_from
from .cli.completion import kubectl_complete

__all__ = ["DEFAULT_CERT_DIR", "build_parser", "flags_given", "kubectl_complete", "main", "plugin", "settings_from"]

if __name__ == "__main__":
    sys.exit(main())
