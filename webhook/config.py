"""One frozen settings object, built from flags with environment fallbacks."""
from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Mapping

from . import kinds

ENV_PREFIX = "COLOCATE_"
PIN_MODES = ("required", "preferred")
KEEP_MODES = ("off", "report", "migrate")
MIGRATION_TARGET_MODES = ("untouched", "prefer")
# An annotation key: an optional DNS-subdomain prefix and '/', then a name of at most 63 characters.
_QUALIFIED_NAME = re.compile(
    r"(?:(?=.{1,253}/)[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?"
    r"(?=.{1,63}$)[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
)


@dataclasses.dataclass(frozen=True)
class Settings:
    # The opt-in annotation on the VM template (propagated to the virt-launcher pod).
    opt_in_annotation: str = kinds.DEFAULT_OPT_IN
    # Prefix of the annotations that record our decision on the pod.
    decision_prefix: str = kinds.DEFAULT_DECISION_PREFIX
    longhorn_namespace: str = kinds.DEFAULT_LONGHORN_NAMESPACE
    csi_driver: str = kinds.DEFAULT_CSI_DRIVER
    # Steer share-manager pods toward their running consumer (the cold-start rule).
    share_manager_rule: bool = True
    # Deadline used when the apiserver sends no ?timeout= (its own default is 10 s).
    default_timeout: float = 10.0
    # Answer this long before the apiserver gives up on us.
    deadline_margin: float = 1.0
    # "required": pin where every check passes; "preferred": only ever the weighted preference.
    pin: str = "required"
    # Migration target pods of opted-in VMs: "untouched", or "prefer" the storage node for a
    # migration that names no node (KubeVirt's evacuations, the descheduler's, a user's).
    migration_targets: str = "untouched"
    # The keeper: "off", "report" (decide and report only) or "migrate".
    keep: str = "report"
    keep_after: float = 600.0  # seconds apart (and since the VM's last migration) before acting
    keep_after_descheduled: float = 21600.0  # seconds since the descheduler moved a VM before taking it back
    keep_max_inflight: int = 2  # our migrations in flight at once
    keep_max_per_day: int = 2  # our migrations of one VM in 24 hours
    keep_max_outbound_per_node: int = 2  # KubeVirt's parallelOutboundMigrationsPerNode
    lease_namespace: str = ""  # default: the pod's own namespace
    lease_name: str = "kubevirt-colocate-keeper"

    def __post_init__(self) -> None:
        for name, allowed in (("pin", PIN_MODES), ("keep", KEEP_MODES), ("migration_targets", MIGRATION_TARGET_MODES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {getattr(self, name)!r}")
        if (self.keep_after < 0 or self.keep_after_descheduled < 0 or self.keep_max_inflight < 1
                or self.keep_max_per_day < 1 or self.keep_max_outbound_per_node < 1):
            raise ValueError("keep-after and keep-after-descheduled must be >= 0, keep-max-inflight, "
                             "keep-max-per-day and keep-max-outbound-per-node >= 1")
        # A bad key would make every opted-in pod fail validation: refuse to start instead.
        for key in (self.opt_in_annotation, self.decision_annotation):
            if not _QUALIFIED_NAME.fullmatch(key):
                raise ValueError(f"{key!r} is not a valid annotation key (prefix/name)")

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
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Defaults, then COLOCATE_* environment variables, then explicit overrides (flags)."""
        env = os.environ if env is None else env
        values: dict[str, object] = {}
        for field in dataclasses.fields(cls):
            raw = env.get(ENV_PREFIX + field.name.upper())
            if raw is not None and raw != "":
                values[field.name] = _convert(field.type, raw, field.name)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def _convert(kind: object, raw: str, name: str) -> object:
    if kind in (bool, "bool"):
        lowered = raw.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{ENV_PREFIX}{name.upper()}: expected true/false, got {raw!r}")
    if kind in (int, "int"):
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"{ENV_PREFIX}{name.upper()}: expected a whole number, got {raw!r}") from None
    if kind in (float, "float"):
        try:
            return float(raw)
        except ValueError:
            raise ValueError(f"{ENV_PREFIX}{name.upper()}: expected a number, got {raw!r}") from None
    return raw
