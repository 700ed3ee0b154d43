"""Pure: whether Longhorn reboots co-located VMs when their NFS server restarts, from its Settings,
and its blacklist with VMIs on it (`sparing`). A VM it spared keeps the mount of the NFS server that
went away: `rules/keeping/recovery.py` tells when that mount is stale.

When an RWX volume's share-manager fails or restarts, Longhorn sets the volume's
`status.remountRequestedAt`, and longhorn-manager deletes each pod of the volume that started before
it and has a controller owner (`handlePodDeletionIfVolumeRequestRemount`): since 1.12
(longhorn/longhorn#12986) on the cluster network too; before, only where RWX volumes have a network
of their own (`endpoint-network-for-rwx-volume`, 1.11; before it `storage-network` with
`storage-network-for-rwx-volume-enabled`). Gated by AUTO_DELETE (default true) and the owner kinds
in BLACKLIST (`group/Kind;...`, empty by default). A launcher pod's controller is its VMI: deleted,
the VM reboots; a plain delete, which no PodDisruptionBudget stops.
"""
from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping

ENDPOINT_NETWORK = "endpoint-network-for-rwx-volume"
STORAGE_NETWORK = "storage-network"
STORAGE_NETWORK_FOR_RWX = "storage-network-for-rwx-volume-enabled"
AUTO_DELETE = "auto-delete-pod-when-volume-detached-unexpectedly"
BLACKLIST = "blacklist-for-auto-delete-pod-when-volume-detached-unexpectedly"
VERSION = "current-longhorn-version"
VMI_KIND = "kubevirt.io/VirtualMachineInstance"  # a launcher pod's owner, as the blacklist names kinds
SETTINGS = (VERSION, ENDPOINT_NETWORK, STORAGE_NETWORK, STORAGE_NETWORK_FOR_RWX, AUTO_DELETE, BLACKLIST)
OWNER_KIND = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z][A-Za-z0-9]*")
FIX = f"add {VMI_KIND} to {BLACKLIST}: `kubevirt-colocate spare-vms` (docs/operations.md, its price)"


class Answer(enum.StrEnum):
    YES = "yes"
    NO = "no"
    CANNOT_TELL = "cannot tell"


@dataclasses.dataclass(frozen=True)
class Restarts:
    """Whether a share-manager restart reboots the VMs of its volume, and why (with the fix)."""

    answer: Answer
    why: str

    def warning(self) -> str | None:
        """The line `status` and the log say, None when VMs are not rebooted."""
        if self.answer is Answer.NO:
            return None
        if self.answer is Answer.CANNOT_TELL:
            return f"cannot tell whether Longhorn reboots VMs when their share-manager restarts: {self.why}"
        return f"Longhorn reboots VMs when their share-manager restarts: {self.why}; {FIX}"


def version(text: str | None) -> tuple[int, int, int] | None:
    """`v1.12.0` (or `1.12.0-rc1`) as numbers; None when it is not a Longhorn version."""
    found = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)([-+][0-9A-Za-z.-]+)?", (text or "").strip())
    return (int(found[1]), int(found[2]), int(found[3])) if found else None


def blacklisted(text: str | None) -> list[str] | None:
    """The owner kinds of the blacklist, in Longhorn's `group/Kind;...` form; None when an entry is not one."""
    kinds = [kind.strip() for kind in (text or "").split(";") if kind.strip()]
    return kinds if all(OWNER_KIND.fullmatch(kind) for kind in kinds) else None


def restarts_vms(values: Mapping[str, str] | None, *, blacklistable: bool = True) -> Restarts:
    """From Longhorn's Settings by name (None: they could not be read). Never a guess: a value this release does not
    know how Longhorn reads is "cannot tell"."""
    if values is None:
        return Restarts(Answer.CANNOT_TELL, "Longhorn's Settings could not be read")
    auto = (values.get(AUTO_DELETE) or "true").strip().lower()
    if auto not in ("true", "false"):
        return Restarts(Answer.CANNOT_TELL, f"{AUTO_DELETE} is {values.get(AUTO_DELETE)!r}, not true or false")
    if auto == "false":
        return Restarts(Answer.NO, f"{AUTO_DELETE} is false: Longhorn deletes no pod of a remounted volume")
    kinds = blacklisted(values.get(BLACKLIST)) if blacklistable else []
    if kinds is None:
        return Restarts(Answer.CANNOT_TELL, f"{BLACKLIST} is {values.get(BLACKLIST)!r}, not owner kinds (group/Kind;...)")
    if VMI_KIND in kinds:
        return Restarts(Answer.NO, f"{VMI_KIND} is in {BLACKLIST}: Longhorn leaves launcher pods alone")
    running = version(values.get(VERSION))
    network = rwx_network(values)
    if running is None:
        if network is not None:  # every Longhorn with such a network deletes them
            return Restarts(Answer.YES, f"{network} and {AUTO_DELETE} is on")
        return Restarts(Answer.CANNOT_TELL, f"{VERSION} is {values.get(VERSION)!r}, not a Longhorn version")
    said = "v" + ".".join(map(str, running))
    if running[:2] >= (1, 12):  # the first Longhorn that deletes them on the cluster network too
        return Restarts(Answer.YES, f"Longhorn {said} deletes the launcher pods of a volume whose share-manager "
                                    f"restarted, and {AUTO_DELETE} is on")
    if network is not None:
        return Restarts(Answer.YES, f"Longhorn {said} with {network} and {AUTO_DELETE} is on")
    return Restarts(Answer.NO, f"Longhorn {said} deletes them only where RWX volumes have a network of their own")


def rwx_network(values: Mapping[str, str]) -> str | None:
    """The network RWX volumes are served on when it is not the cluster network, in words."""
    endpoint = (values.get(ENDPOINT_NETWORK) or "").strip()
    if endpoint:
        return f"{ENDPOINT_NETWORK} is {endpoint}"
    storage = (values.get(STORAGE_NETWORK) or "").strip()
    if storage and (values.get(STORAGE_NETWORK_FOR_RWX) or "").strip().lower() == "true":
        return f"{STORAGE_NETWORK} {storage} serves RWX volumes ({STORAGE_NETWORK_FOR_RWX})"
    return None


def sparing(text: str | None, spare: bool = True) -> str:
    """The blacklist with the VMI kind added (`spare`) or taken out, the others kept in order (the
    value as it was when nothing changes); ValueError when it is not owner kinds: a change would be a guess."""
    kinds = blacklisted(text)
    if kinds is None:
        raise ValueError(f"{BLACKLIST} is {text!r}, not owner kinds (group/Kind;...)")
    if spare == (VMI_KIND in kinds):
        return text or ""
    return ";".join([*kinds, VMI_KIND] if spare else [kind for kind in kinds if kind != VMI_KIND])
