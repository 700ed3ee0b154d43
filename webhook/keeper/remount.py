"""Whether Longhorn reboots co-located VMs when their share-manager restarts (`restarts_vms`), read once a pass and
logged when it changes; with `--spare-vms on`, the VMI kind added to the blacklist where missing (`keeper.spare`)."""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .. import metrics
from . import spare
from ..stores.direct import ClusterStore
from ..lookup.replicas import read_settings
from ..cluster.client import Api, KubeError
from ..config import Settings
from ..rules.shared.longhorn import BLACKLIST, SETTINGS, VMI_KIND, Answer, Restarts, blacklisted, restarts_vms

log = logging.getLogger("webhook.keeper")


class Remount:
    def __init__(self, store: ClusterStore, settings: Settings, timeout: float, *, api: Any = None,
                 authority: Callable[[float], bool] = lambda within: True):
        self.store, self.settings, self.timeout = store, settings, timeout
        self.api, self.authority = api, authority
        self.read: tuple[tuple[str, str | None], ...] | None = None  # the Settings as last said (None: not yet)

    async def check(self) -> Restarts:
        values = await read_settings(self.store, self.settings, self.timeout)
        if values is not None and await self._spare(values):
            values = await read_settings(self.store, self.settings, self.timeout)
        restarts = restarts_vms(values)
        gauge = metrics.show(metrics.LONGHORN_RESTARTS_VMS)
        for answer in Answer:
            gauge.labels(answer.replace(" ", "_")).set(1 if answer is restarts.answer else 0)
        read = (("read", "yes" if values is not None else None),
                *((name, (values or {}).get(name)) for name in SETTINGS))
        if read != self.read:
            self.read = read
            level = logging.INFO if restarts.answer is Answer.NO else logging.WARNING
            log.log(level, "longhorn and share-manager restarts", extra={"fields": {
                "answer": str(restarts.answer), "why": restarts.warning() or restarts.why,
                "settings": {k: v for k, v in read[1:] if v is not None}}})
        return restarts

    async def _spare(self, values: dict[str, str]) -> bool:
        """With --spare-vms on, the VMI kind added where it is missing: whether the Setting changed."""
        kinds = blacklisted(values.get(BLACKLIST))
        if (not self.settings.spare_vms or self.api is None or kinds is None or VMI_KIND in kinds
                or not self.authority(self.timeout)):  # the lease asked just before acting, as for a migration
            return False
        try:
            said = await spare.change(Api(self.api), self.settings.longhorn_namespace, True,
                                      by="kubevirt-colocate (--spare-vms on)")
        except KubeError as exc:
            log.warning("longhorn setting not changed", extra={"fields": {"setting": BLACKLIST, "error": str(exc)}})
            return False
        log.info("longhorn setting changed", extra={"fields": {"setting": BLACKLIST, "change": said}})
        return True
