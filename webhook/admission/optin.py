"""Does our own MutatingWebhookConfiguration let opted-in pods through? When its matchConditions (manifests/base) name
another key than --opt-in-annotation, no VM reaches the webhook, silently: `serve` says so in a log line and a /readyz
note (readiness stays OK). The CEL conditions are read as the shipped one is written: one names the key, quoted."""
from __future__ import annotations

import logging
from typing import Any

from .. import kinds
from ..background import Background, Companion
from ..stores.store import Store, StoreError
from ..kinds import MUTATING_WEBHOOK

log = logging.getLogger("webhook.optin")

DEFAULT_CONFIGURATION = "kubevirt-colocate"  # manifests/base/mutatingwebhookconfiguration.yaml


def shut_out(configuration: dict[str, Any], key: str) -> list[str]:
    """The webhooks of `configuration` for virt-launcher pods whose matchConditions do not
    name `key`: a pod annotated with it never reaches us through them."""
    found = []
    for hook in configuration.get("webhooks") or []:
        labels = ((hook.get("objectSelector") or {}).get("matchLabels")) or {}
        conditions = hook.get("matchConditions") or []
        if labels.get(kinds.VIRT_LAUNCHER[0]) != kinds.VIRT_LAUNCHER[1] or not conditions:
            continue
        expressions = [str(c.get("expression") or "") for c in conditions if isinstance(c, dict)]
        if not any(f"'{key}'" in e or f'"{key}"' in e for e in expressions):
            found.append(str(hook.get("name") or "?"))
    return found


class OptInCheck(Companion):
    """A companion of `serve` (start, stop, degraded): the note while the configuration shuts our key out."""

    def __init__(self, store: Store, key: str, name: str = DEFAULT_CONFIGURATION, *, period: float = 60.0,
                 timeout: float = 5.0):
        self.store, self.key, self.name, self.timeout = store, key, name, timeout
        self._note = ""
        self.task = Background("opt-in check", self.check, log=log, failure="checking the webhook configuration "
                               "failed", period=period)

    def degraded(self) -> list[str]:
        return ([self._note] if self._note else []) + super().degraded()

    async def check(self) -> str:
        """Read the configuration once; the note (empty when the key gets through or it cannot be told)."""
        try:
            configuration = await self.store.get(MUTATING_WEBHOOK, None, self.name, timeout=self.timeout)
        except StoreError:
            return self._note  # unknown: what was said stands
        hooks = shut_out(configuration or {}, self.key)
        note = (f"MutatingWebhookConfiguration {self.name}: the matchConditions of {', '.join(hooks)} do not "
                f"name --opt-in-annotation {self.key}: no opted-in pod reaches the webhook") if hooks else ""
        if note and note != self._note:
            log.warning("opt-in annotation shut out", extra={"fields": {
                "configuration": self.name, "webhooks": hooks, "opt_in_annotation": self.key}})
        self._note = note
        return note
