"""The settings: `AdmissionSettings` (`serve`) and `KeeperSettings` (`keep`) on what both share (`SharedSettings`);
`Settings` holds both, for the tools that judge as both roles do. Each setting is declared once, as a field with its
flag (`setting`): that gives each verb's flags (cli/parser.py), the COLOCATE_* variables (`from_env`) and the reading
of a deployed `keep`'s command line (`from_command`)."""
from __future__ import annotations

import dataclasses
import enum
import functools
import os
import re
import typing
from collections.abc import Mapping
from typing import Any

from . import kinds
from .kinds import DNS_LABEL, DNS_SUBDOMAIN, QUALIFIED_NAME

ENV_PREFIX = "COLOCATE_"
# The verbs that take a setting as a flag; DISKS: every verb that resolves a VM's disks.
SERVE, KEEP, REVIEW, EXPLAIN, STATUS, SPARE_VMS = "serve", "keep", "review", "explain", "status", "spare-vms"
DISKS = (SERVE, KEEP, REVIEW, EXPLAIN, STATUS)
KEEPER_VERBS = (KEEP, STATUS)


# A duration as every flag and COLOCATE_* variable takes it, and as `status` prints it: seconds, or
# numbers each with its unit, as kubectl's --request-timeout and Go write them (600, 600s, 10m, 1h30m).
DURATION_FORMS = "seconds, or a number with ms, s, m or h: 600, 600s, 10m, 1h30m"
_DURATION = re.compile(r"\d+(?:\.\d+)?|(?:\d+(?:\.\d+)?(?:ms|s|m|h))+")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class Seconds(float):
    """A setting that is a duration: flags and COLOCATE_* write it as `seconds` reads it."""


def seconds(text: str) -> float:
    """The seconds a duration says (600, 600s, 10m, 1h30m, 500ms); ValueError for anything else."""
    text = text.strip()
    if not _DURATION.fullmatch(text):
        raise ValueError(f"{text!r} is not a duration ({DURATION_FORMS})")
    return sum(float(number) * _UNIT[unit or "s"] for number, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)?", text))


def duration_text(value: float) -> str:
    """Seconds written as `seconds` reads them back exactly: 10m, 1h30m, 45s, 1.5s, 0s."""
    whole, rest = divmod(round(value * 1000), 1000)
    hours, whole = divmod(whole, 3600)
    minutes, whole = divmod(whole, 60)
    tail = f"{whole + rest / 1000:g}s" if whole or rest or not (hours or minutes) else ""
    return (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "") + tail


def named(value: str, setting: str, form: re.Pattern[str], what: str) -> None:
    """Refuse a name the API would refuse, naming the setting and what it must be."""
    if not form.fullmatch(value):
        raise ValueError(f"{setting} must be {what}, not {value!r}")


# `serve --body-budget`: MiB of admission request bodies held at once (admission/budget.py), 64 of
# the largest reviews (3 MiB); a pod's review is a few KiB.
BODY_BUDGET_MIB = 192


class PinMode(enum.StrEnum):
    """How a VM pod is placed where every check passes."""

    REQUIRED = "required"  # pinned to the storage node
    PREFERRED = "preferred"  # only ever the weighted preference
    OFF = "off"  # every pod admitted as it came: the webhook stays installed and changes nothing


class KeepMode(enum.StrEnum):
    """The keeper: off, or on in one of its modes (report and migrate run it; status decides as report for off)."""

    OFF = "off"
    REPORT = "report"  # decide and report only
    MIGRATE = "migrate"


# Settings that were removed: still set in an environment, each is ignored with this warning, so
# that an upgrade keeping an old variable starts (docs/operations.md, "Migration targets").
RETIRED = {
    "migration_targets": "migration target pods are always left untouched (--migration-targets prefer was "
                         "removed: docs/operations.md, \"Migration targets\")",
}


def retired(env: Mapping[str, str]) -> list[str]:
    """A warning for each removed setting still given as COLOCATE_<NAME>."""
    return [f"{ENV_PREFIX}{name.upper()} is ignored: {why}" for name, why in RETIRED.items()
            if env.get(ENV_PREFIX + name.upper())]


def setting(default: Any, meaning: str, verbs: tuple[str, ...], **flag: Any) -> Any:
    """A field of a settings part with its flag: its default, what it means, the verbs that take it."""
    return dataclasses.field(default=default, metadata={"help": meaning, "verbs": verbs, **flag})


@dataclasses.dataclass(frozen=True)
class SharedSettings:
    """What both roles read a VM's disks with: the opt-in, the decision's annotations, Longhorn's."""

    opt_in_annotation: str = setting(kinds.DEFAULT_OPT_IN, "pod annotation that opts a VM in", DISKS)
    # Prefix of the annotations that record our decision on the pod.
    decision_prefix: str = kinds.DEFAULT_DECISION_PREFIX
    longhorn_namespace: str = setting(kinds.DEFAULT_LONGHORN_NAMESPACE, "namespace of Longhorn's share-managers",
                                      (*DISKS, SPARE_VMS))
    csi_driver: str = setting(kinds.DEFAULT_CSI_DRIVER, "CSI driver of Longhorn volumes", DISKS)

    def __post_init__(self) -> None:
        for row in rows(type(self)):  # the modes, from their names (flags, COLOCATE_*, tests) to their enum
            if issubclass(row.kind, enum.Enum):
                object.__setattr__(self, row.name, row.member(getattr(self, row.name)))
        self.check()

    def check(self) -> None:
        """Refuse values no run could use (each part adds its own, then calls this)."""
        # A bad key would make every opted-in pod fail validation: refuse to start instead.
        for key in (self.opt_in_annotation, self.decision_annotation):
            if not QUALIFIED_NAME.fullmatch(key):
                raise ValueError(f"{key!r} is not a valid annotation key (prefix/name)")
        named(self.longhorn_namespace, "longhorn-namespace", DNS_LABEL, "a namespace (a DNS-1123 label)")

    @functools.cached_property
    def decision_annotation(self) -> str:
        return f"{self.decision_prefix}{kinds.DECISION}"

    @functools.cached_property
    def node_annotation(self) -> str:
        return f"{self.decision_prefix}{kinds.NODE_KEY}"

    @functools.cached_property
    def reason_annotation(self) -> str:
        return f"{self.decision_prefix}{kinds.REASON}"

    @classmethod
    def checked(cls, name: str, value: object, given_as: str) -> object:
        """`value` of setting `name` when in its range; else a ValueError naming where it was given."""
        try:
            cls(**{name: value})
        except ValueError as exc:
            raise ValueError(f"{given_as}: {exc}") from None
        return value

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, verb: str | None = None, **overrides: object) -> Any:
        """Defaults, then this part's COLOCATE_* variables (with `verb`, those it takes: `review` reads
        no COLOCATE_KEEP), then explicit overrides (flags)."""
        env = os.environ if env is None else env
        values: dict[str, object] = {}
        for row in rows(cls):
            if verb is not None and row.verbs and verb not in row.verbs:
                continue
            if raw := env.get(row.env):
                values[row.name] = cls.checked(row.name, row.parse(raw), f"{row.env}={raw!r}")
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @classmethod
    def from_command(cls, args: object, env: Mapping[str, str]) -> Any:
        """What `keep` runs with, given a container's arguments and environment: its COLOCATE_*, then its flags."""
        return cls.from_env({**env, **flags_as_env(args, rows(cls))})


@dataclasses.dataclass(frozen=True)
class AdmissionSettings(SharedSettings):
    """`serve`'s: how a pod is placed, and the deadline it is answered within."""

    pin: PinMode = setting(PinMode.REQUIRED, "required: pin where kube-scheduler would say yes; preferred: only "
                           "prefer the node; off: change no pod", (SERVE, REVIEW, EXPLAIN))
    # Steer share-manager pods toward their running consumer (the cold-start rule).
    share_manager_rule: bool = setting(True, "steer share-manager pods to their VM", (SERVE, REVIEW))
    # Opt-in: KubeVirt's drain migrations get spec.addedNodeSelector toward the VM's storage (rules/placement/aim.py).
    aim_evacuations: bool = setting(
        False, "on: aim KubeVirt's evacuation migrations of a drained (cordoned) node at the node of each VM's "
        "storage, the share-managers following them; needs the install's aim-evacuations webhook "
        "(docs/operations.md)", (SERVE, STATUS))
    kubevirt_namespace: str = setting("kubevirt", "namespace KubeVirt runs in: only its virt-controller's evacuations "
                                      "are aimed", (SERVE, STATUS))
    # Deadline used when the apiserver sends no ?timeout= (its own default is 10 s).
    default_timeout: float = 10.0
    # Answer this long before the apiserver gives up on us.
    deadline_margin: float = 1.0


@dataclasses.dataclass(frozen=True)
class KeeperSettings(SharedSettings):
    """`keep`'s: its mode, its pace and bounds, its Lease."""

    keep: KeepMode = setting(KeepMode.REPORT, "after placement: off, report (decide and report only) or migrate",
                             KEEPER_VERBS)
    keep_after: Seconds = setting(600.0, "how long a VM is apart, and since its last migration, before it is moved",
                                  KEEPER_VERBS, metavar="DURATION")
    keep_after_descheduled: Seconds = setting(
        21600.0, "how long after the descheduler moved a VM (its eviction's migration ended) before it is moved back "
        "to its storage; 0: no longer than --keep-after", KEEPER_VERBS, metavar="DURATION")
    keep_max_inflight: int = setting(2, "our migrations in flight at once", KEEPER_VERBS, metavar="N")
    keep_max_per_day: int = setting(2, "our migrations of one VM in 24 hours", KEEPER_VERBS, metavar="N")
    keep_max_outbound_per_node: int = setting(
        2, "KubeVirt's parallelOutboundMigrationsPerNode: while this many migrations leave a VM's node, it is not "
        "moved", KEEPER_VERBS, metavar="N", default_text="{}, KubeVirt's default")
    spare_vms: bool = setting(
        False, "on: the keeper's leader puts kubevirt.io/VirtualMachineInstance on Longhorn's "
        "blacklist-for-auto-delete-pod-when-volume-detached-unexpectedly, beside the kinds there, whenever it is "
        "missing, so that a share-manager restart does not reboot VMs (docs/operations.md: its price)", (KEEP,))
    lease_namespace: str = setting("", "namespace of the keeper's Lease", KEEPER_VERBS, metavar="NS",
                                   default_text="the pod's own; required outside a cluster")
    lease_name: str = setting("kubevirt-colocate-keeper", "name of the keeper's Lease", KEEPER_VERBS, metavar="NAME")

    def check(self) -> None:
        if (self.keep_after < 0 or self.keep_after_descheduled < 0 or self.keep_max_inflight < 1
                or self.keep_max_per_day < 1 or self.keep_max_outbound_per_node < 1):
            raise ValueError("keep-after and keep-after-descheduled must be >= 0, keep-max-inflight, "
                             "keep-max-per-day and keep-max-outbound-per-node >= 1")
        if self.lease_namespace:
            named(self.lease_namespace, "lease-namespace", DNS_LABEL, "a namespace (a DNS-1123 label)")
        named(self.lease_name, "lease-name", DNS_SUBDOMAIN, "a Lease's name (a DNS-1123 subdomain)")
        super().check()


@dataclasses.dataclass(frozen=True)
class Settings(AdmissionSettings, KeeperSettings):
    """Both parts: what the tools that judge as both roles do (`review`, `explain`, `status`) run with."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """One field of Settings as the command line and the environment know it: a flag of `verbs` (none: no flag)."""

    name: str
    kind: type
    default: object
    help: str = ""
    verbs: tuple[str, ...] = ()
    metavar: str | None = None
    default_text: str = "{}"  # the default as --help says it, {} standing for the value

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def choices(self) -> list[str] | None:
        """What the flag accepts, when it is a closed choice (on/off for a switch)."""
        if self.kind is bool:
            return ["on", "off"]
        return [str(member) for member in self.kind] if issubclass(self.kind, enum.Enum) else None

    def shown_default(self) -> str:
        value = self.default
        shown = ("on" if value else "off") if isinstance(value, bool) else duration_text(float(value)) \
            if self.kind is Seconds else f"{value:g}" if isinstance(value, float) else str(value)
        return self.default_text.format(shown)

    def member(self, value: object) -> object:
        """A mode's enum member from its name; ValueError naming the setting and its choices."""
        try:
            return self.kind(value)
        except ValueError:
            raise ValueError(f"{self.name} must be one of {', '.join(self.choices or ())}, not {value!r}") from None

    def parse(self, raw: str) -> object:
        """A value as written in COLOCATE_<NAME> or after a switch's flag (on/off)."""
        convert, expected = _PARSERS.get(self.kind, (str, ""))
        try:
            return convert(raw)
        except ValueError:
            raise ValueError(f"{self.env}: expected {expected}, got {raw!r}") from None


def _switch(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise ValueError(raw)
    return lowered in ("1", "true", "yes", "on")


_PARSERS: dict[type, tuple[Any, str]] = {bool: (_switch, "true/false"), int: (int, "a whole number"),
                                         float: (float, "a number"), Seconds: (seconds, f"a duration ({DURATION_FORMS})")}


@functools.cache
def rows(cls: type) -> tuple[Setting, ...]:
    """The settings of a part (or of Settings: all), each with how it is given."""
    types = typing.get_type_hints(cls)
    return tuple(Setting(name=field.name, kind=types[field.name], default=field.default, **field.metadata)
                 for field in dataclasses.fields(cls))


SETTINGS = rows(Settings)
# The keeper's own (declared by its part, not shared with admission).
KEEPER_SETTINGS = tuple(row for row in SETTINGS if row.name in vars(KeeperSettings)["__annotations__"])


def flags_as_env(args: object, among: tuple[Setting, ...]) -> dict[str, str]:
    """`--keep=migrate` or `--keep migrate` as COLOCATE_KEEP: the flags of a command line that are
    settings (`among`), in the form `from_env` reads."""
    options = {row.option: row for row in among if row.verbs}
    found: dict[str, str] = {}
    args = [a for a in args if isinstance(a, str)] if isinstance(args, list) else []
    for i, arg in enumerate(args):
        option, has_value, value = arg.partition("=")
        if not has_value:
            value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else ""
        if option in options and value:
            found[options[option].env] = value
    return found
