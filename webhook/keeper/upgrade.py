"""What the keeper may act in, read before it acts and every 10 s: while an older install's keeper settings on the
webhook's Deployment differ from its own, it only reports (docs/operations.md, "Upgrading"); its own Deployment's
annotation `kubevirt-colocate/keep` pauses it (there, "Pausing the keeper"); a Deployment it cannot read: report.
"""
from __future__ import annotations

import dataclasses

from ..kinds import DEPLOYMENT, meta
from ..lookup.deployments import Container, container
from ..stores.store import Store, StoreError
from ..config import KEEPER_SETTINGS, KeeperSettings, KeepMode, Setting, flags_as_env

WEBHOOK = "kubevirt-colocate", "webhook"  # the webhook's Deployment and its container, as installed
KEEPER = "kubevirt-colocate-keeper"  # the keeper's own Deployment, as installed
PAUSE = "kubevirt-colocate/keep"  # on the keeper's Deployment: `off`, else (any value) report
RECHECK = 10.0  # seconds between two reads of the Deployments: a pause holds the keeper within a pass (30 s)
LEAST = (KeepMode.OFF, KeepMode.REPORT, KeepMode.MIGRATE)  # from the mode that does least


@dataclasses.dataclass(frozen=True)
class Hold:
    """The mode the keeper acts in, and why it is not its own (None: it is)."""

    mode: KeepMode
    why: str | None = None


def least(*modes: KeepMode) -> KeepMode:
    return min(modes, key=LEAST.index)


def differs(own: KeeperSettings, row: Setting, raw: str | None) -> bool:
    """Whether `raw` is not what the keeper runs with (unknown or unreadable: it is not)."""
    if raw is None:
        return True
    try:
        value = row.member(raw) if row.kind is KeepMode else row.parse(raw)
    except ValueError:
        return True
    return value != getattr(own, row.name)


def hold(own: KeeperSettings, webhook: Container | str, where: str) -> Hold:
    """What the keeper acts in, given the webhook's container (a str: there is none, nothing holds it)."""
    if isinstance(webhook, str):
        return Hold(own.keep)
    flags = flags_as_env(webhook.args, KEEPER_SETTINGS)
    # Each keeper setting the webhook's container sets, as written and its value (None: `valueFrom`).
    written = {row: (row.option, flags[row.env]) if row.env in flags else (row.env, webhook.env[row.env])
               for row in KEEPER_SETTINGS if row.env in flags or row.env in webhook.env}
    given = {row: raw for row, raw in written.items() if differs(own, row, raw[1])}
    if not given:
        return Hold(own.keep)
    said_off = any(row.name == "keep" and raw == KeepMode.OFF for row, (_, raw) in given.items())
    mode = least(own.keep, KeepMode.OFF if said_off else KeepMode.REPORT)
    shown = ", ".join(f"{name}={'(valueFrom)' if raw is None else raw}" for name, raw in given.values())
    return Hold(mode, f"{where} sets the keeper's {shown}, unlike the keeper's own Deployment: the keeper "
                      f"runs {mode} until they are moved there (docs/operations.md, Upgrading)")


async def read_hold(store: Store, own: KeeperSettings, namespace: str, *, timeout: float = 10.0,
                    unread_holds: bool = True) -> Hold:
    """`hold`, from the webhook's Deployment in `namespace` as the cluster has it now; one not read holds the
    keeper to report, unless not `unread_holds` (`status`, whose user may not read what the keeper's account may)."""
    where = f"Deployment {namespace}/{WEBHOOK[0]}"
    try:
        webhook = await container(store, namespace, *WEBHOOK, timeout=timeout)
    except StoreError as exc:
        if not unread_holds:
            return Hold(own.keep)
        mode = least(own.keep, KeepMode.REPORT)
        return Hold(mode, f"{where} not read ({exc}): the keeper runs {mode} until it is (docs/operations.md, "
                          f"Upgrading)")
    return hold(own, webhook, where)


def paused(own: KeeperSettings, annotations: object, where: str) -> Hold:
    """The mode its own Deployment's PAUSE annotation allows: `off` stops it, anything else holds it to report."""
    raw = annotations.get(PAUSE) if isinstance(annotations, dict) else None
    if raw is None:
        return Hold(own.keep)
    mode = least(own.keep, KeepMode.OFF if raw == KeepMode.OFF else KeepMode.REPORT)
    return Hold(mode, f"{where} is annotated {PAUSE}={raw}: the keeper runs {mode} until the annotation is "
                      "removed (docs/operations.md, Pausing the keeper)")


async def read_mode(store: Store, own: KeeperSettings, namespace: str, *, timeout: float = 10.0,
                    unread_holds: bool = True) -> Hold:
    """The mode the keeper may act in now: the least of `read_hold`'s and its own Deployment's pause (`paused`),
    every reason given."""
    holds = [await read_hold(store, own, namespace, timeout=timeout, unread_holds=unread_holds)]
    where = f"Deployment {namespace}/{KEEPER}"
    try:
        annotations = meta(await store.get(DEPLOYMENT, namespace, KEEPER, timeout=timeout)).get("annotations")
        holds.append(paused(own, annotations, where))
    except StoreError as exc:
        mode = least(own.keep, KeepMode.REPORT)
        holds.append(Hold(mode, f"{where} not read ({exc}): the keeper runs {mode} until it is"))
    return Hold(least(*(h.mode for h in holds)), "; ".join(h.why for h in holds if h.why) or None)
