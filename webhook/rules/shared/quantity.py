"""Pure: Kubernetes resource quantities, read exactly as the apiserver and the scheduler read them.

Grammar and rounding follow k8s.io/apimachinery `pkg/api/resource/quantity.go` (`ParseQuantity`)
and `suffix.go`: a sign, digits with an optional fraction (`.5`, `1.`), then no suffix, a decimal SI
one, a binary one or an exponent (`e3`, `E-2`); finer than 1n rounds up to 1n, binary values cap at
2^63-1. A quantity is an exact count of nano-units, so sums stay exact and rounding to the
scheduler's units (cpu in millicores, the rest whole, both up: framework/types.go `Resource.Add`)
happens once, at the end.
"""
from __future__ import annotations

import re

NANO = 10**9
MILLI = 10**6  # nano-units per millicore
CPU = "cpu"
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_MAX_BINARY = (2**63 - 1) * NANO
# Beyond this an exponent is no resource size anyone means; refusing it keeps a hostile
# string from making us build a number with millions of digits.
_MAX_EXPONENT = 100
# Possessive digits: the suffix can never take back the number's own digits, so a string that
# does not parse fails in one pass (a backtracking match took seconds on 30,000 digits and a letter).
_QUANTITY = re.compile(r"([+-]?)([0-9]*+)(?:\.([0-9]*+))?([eEinumkKMGTP]*[+-]?[0-9]*)", re.ASCII)
# Longer than any quantity the apiserver writes (it normalises what it stores: `resource.Quantity`'s
# canonical form), with room to spare: beyond it a value is refused before it is read.
MAX_LENGTH = 64


def nanos(value: object) -> int:
    """The quantity in nano-units (1 == 1n), exactly; ValueError when it does not parse. A JSON
    number's text is parsed like a string, as `Quantity.UnmarshalJSON` does."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return value * NANO
    text = (repr(value) if isinstance(value, float) else value).strip(" \t\n\r\v\f")
    if len(text) > MAX_LENGTH:
        raise ValueError(f"not a quantity: {len(text)} characters (a quantity has at most {MAX_LENGTH})")
    match = _QUANTITY.fullmatch(text) if text else None
    if match is None:
        raise ValueError(f"not a quantity: {value!r}")
    sign, whole, fraction, suffix = match.groups()
    fraction = fraction or ""
    if suffix in _DECIMAL:
        base, exponent = 10, _DECIMAL[suffix]
    elif suffix in _BINARY:
        base, exponent = 2, _BINARY[suffix]
    elif len(suffix) > 1 and suffix[0] in "eE" and re.fullmatch(r"[+-]?[0-9]+", suffix[1:], re.ASCII):
        base, exponent = 10, int(suffix[1:])
        if abs(exponent) > _MAX_EXPONENT:
            raise ValueError(f"exponent out of range: {value!r}")
    else:
        raise ValueError(f"unknown suffix in quantity {value!r}")
    digits = int((whole + fraction) or "0")
    # digits * 10^-len(fraction) * base^exponent, in units of 10^-9, rounded up to 1n.
    numerator, denominator = digits, 10 ** len(fraction)
    if base == 2:
        numerator <<= exponent
        numerator *= NANO
    elif exponent + 9 >= 0:
        numerator *= 10 ** (exponent + 9)
    else:
        denominator *= 10 ** -(exponent + 9)
    amount = -(-numerator // denominator)
    if base == 2 and amount > _MAX_BINARY:
        amount = _MAX_BINARY
    return -amount if sign == "-" else amount


def units(resource: str, amount_in_nanos: int) -> int:
    """An amount in the scheduler's unit for the resource, rounded up: a millicore for cpu, a whole unit otherwise."""
    return -(-amount_in_nanos // (MILLI if resource == CPU else NANO))


def show(resource: str, amount: int) -> str:
    """An amount in the scheduler's unit, as a person reads it: `1800m`, `2`, `2.2Gi`, `1`."""
    if resource == CPU:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if resource in ("memory", "ephemeral-storage", "storage") or resource.startswith("hugepages-"):
        for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if abs(amount) >= size:
                if amount % size == 0:
                    return f"{amount // size}{suffix}"
                return f"{amount / size:.2f}".rstrip("0").rstrip(".") + suffix
    return str(amount)
