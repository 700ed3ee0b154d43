"""One frozen settings object, built from flags with environment fallbacks."""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

ENV_PREFIX = "COLOCATE_"


@dataclasses.dataclass(frozen=True)
class Settings:
    # The opt-in annotation on the VM template (propagated to the virt-launcher pod).
    opt_in_annotation: str = "kubevirt-scheduler/co-schedule"
    # Prefix of the annotations that record our decision on the pod.
    decision_prefix: str = "kubevirt-scheduler/"
    longhorn_namespace: str = "longhorn-system"
    csi_driver: str = "driver.longhorn.io"
    # Steer share-manager pods toward their running consumer (the cold-start rule).
    share_manager_rule: bool = True
    # Deadline used when the apiserver sends no ?timeout= (its own default is 10 s).
    default_timeout: float = 10.0
    # Answer this long before the apiserver gives up on us.
    deadline_margin: float = 1.0

    @property
    def decision_annotation(self) -> str:
        return f"{self.decision_prefix}decision"

    @property
    def node_annotation(self) -> str:
        return f"{self.decision_prefix}node"

    @property
    def reason_annotation(self) -> str:
        return f"{self.decision_prefix}reason"

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
    if kind in (float, "float"):
        try:
            return float(raw)
        except ValueError:
            raise ValueError(f"{ENV_PREFIX}{name.upper()}: expected a number, got {raw!r}") from None
    return raw
