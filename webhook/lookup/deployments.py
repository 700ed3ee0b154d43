"""A Deployment's container as the cluster stores it: its arguments and environment (I/O only)."""
from __future__ import annotations

import dataclasses

from .. import kinds
from ..kinds import DEPLOYMENT
from ..stores.store import Store


@dataclasses.dataclass(frozen=True)
class Container:
    """What a container runs with: its args, and its env by name (None: a value from elsewhere,
    `valueFrom`, unknown without reading that object)."""

    args: object
    env: dict[str, str | None]


async def container(store: Store, namespace: str, deployment: str, name: str, *, timeout: float) -> Container | str:
    """The container `name` of the Deployment, or in words why there is none (no Deployment, no such
    container). Raises StoreError when the Deployment cannot be read."""
    found = await store.get(DEPLOYMENT, namespace, deployment, timeout=timeout)
    if found is None:
        return f"no Deployment {namespace}/{deployment}"
    containers = kinds.spec(kinds.spec(found).get("template")).get("containers")
    inside = next((c for c in containers if isinstance(c, dict) and c.get("name") == name), None) \
        if isinstance(containers, list) else None
    if inside is None:
        return f"Deployment {namespace}/{deployment} has no container {name}"
    env = {e["name"]: e["value"] if isinstance(e.get("value"), str) else None
           for e in inside.get("env") or [] if isinstance(e, dict) and isinstance(e.get("name"), str)}
    return Container(args=inside.get("args"), env=env)
