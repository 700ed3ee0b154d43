"""The values the command line takes, each checked where it is read. A refusal says what was wrong and
what is accepted, argparse prefixing the flag (`argument --port: 99999 is not a port: 1-65535`); a value
is never changed into another (a port wrapped, a negative count taken)."""
from __future__ import annotations

import argparse
import ipaddress
import re
from collections.abc import Mapping

from ..config import DNS_LABEL, DURATION_FORMS, seconds

# A DNS name as a certificate holds it (RFC 1123 labels, a leading `*.` for a wildcard).
_DNS_NAME = re.compile(rf"(?=.{{1,253}}$)(?:\*\.)?{DNS_LABEL.pattern}(?:\.{DNS_LABEL.pattern})*")
LOG_LEVELS = ("debug", "info", "warning", "error")
MAX_DAYS = 36500  # a hundred years: the certificate's end stays a date X.509 can write


def whole(text: str, what: str, low: int, high: int | None, refusal: str) -> int:
    """A whole number from `low` to `high` (None: no end), else refused: `refusal` with {} for the number."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number ({what})") from None
    if value < low or (high is not None and value > high):
        raise argparse.ArgumentTypeError(refusal.format(value))
    return value


PORTS = "1-65535, or 0 for any free one"


def port(text: str) -> int:
    """A TCP port to listen on; 0 lets the system choose one, which the `serving` log line names."""
    return whole(text, f"a port: {PORTS}", 0, 65535, f"{{}} is not a port: {PORTS}")


def timeout(text: str) -> float:
    """A wait that must end: a duration above 0."""
    value = delay(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration above 0 ({DURATION_FORMS})")
    return value


def delay(text: str) -> float:
    """A duration of 0 or more, in the one syntax every duration flag takes."""
    try:
        return seconds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def days(text: str) -> int:
    """A certificate's validity: 1 day or more (0 would write one already expired)."""
    return whole(text, f"days: 1-{MAX_DAYS}", 1, MAX_DAYS, f"{{}} is not a validity in days: 1-{MAX_DAYS}")


def _address(text: str, named: bool, neither: str) -> str:
    """The IP address `text` spells, as Python writes it; else `text` when it is a name (`named`)."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        if not named:
            raise argparse.ArgumentTypeError(f"{text!r} is neither {neither}") from None
        return text


def san(text: str) -> str:
    """A name for the serving certificate: a DNS name (lower case, RFC 1123) or an IP address."""
    return _address(text, bool(_DNS_NAME.fullmatch(text)),
                    "a DNS name (such as webhook.example.com, lower case) nor an IP address")


def host(text: str) -> str:
    """An address to listen on: an IP address or a host name."""
    return _address(text, bool(_DNS_NAME.fullmatch(text.lower())) and not text.startswith("*"),
                    "an IP address (such as 0.0.0.0 or ::) nor a host name")


def label(text: str) -> str:
    """A Service's or a namespace's name: a DNS-1123 label (it goes into the certificate's names)."""
    if not DNS_LABEL.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a DNS-1123 label (lower case letters, digits and '-', "
                                         f"at most 63, such as kubevirt-colocate)")
    return text


def level(text: str) -> str:
    """A log level, in either case."""
    if text.lower() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a log level: {', '.join(LOG_LEVELS)}")
    return text.lower()


def log_level(given: str | None, env: Mapping[str, str]) -> str:
    """--log-level, else LOG_LEVEL, else info; ValueError naming LOG_LEVEL when it holds no level."""
    if given is not None:
        return given
    raw = env.get("LOG_LEVEL") or "info"
    try:
        return level(raw)
    except argparse.ArgumentTypeError as exc:
        raise ValueError(f"LOG_LEVEL={raw}: {exc}") from None


def mebibytes(text: str) -> int:
    """A whole number of MiB, at least 4 (the largest review, 3 MiB, must fit)."""
    return whole(text, "MiB, at least 4", 4, None, "at least 4 MiB (the largest review is 3 MiB), not {}")

