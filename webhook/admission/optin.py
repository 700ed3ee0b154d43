"""Does our own MutatingWebhookConfiguration let opted-in pods through? Its matchConditions
name the opt-in annotation too (manifests/base), and when they name another key than
--opt-in-annotation no VM reaches the webhook at all, silently. Likewise its objectSelector
keeps migration target pods out unless the install lets them in (manifests/migration-targets),
and then `--migration-targets prefer` has nothing to act on. So `serve` reads the
configuration at start and every `period` seconds, and says so in one log line and a /readyz
note (readiness itself stays OK: the webhook must never block anything).

The conditions are CEL; this reads them the way the shipped one is written: a webhook that
selects virt-launcher pods and has matchConditions must name the key, quoted, in one of them.
"""
from __future__ import annotations

import logging
from typing import Any

from .. import kinds
from ..background import Background
from ..cluster.store import Store, StoreError
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


def targets_shut_out(configuration: dict[str, Any]) -> list[str]:
    """The webhooks for virt-launcher pods, when every one of them keeps migration target pods
    out (objectSelector `kubevirt.io/migrationJobUID DoesNotExist`, as manifests/base has it);
    [] when a target gets through one, or when there is none to tell."""
    hooks = []
    for hook in configuration.get("webhooks") or []:
        selector = hook.get("objectSelector") or {}
        if (selector.get("matchLabels") or {}).get(kinds.VIRT_LAUNCHER[0]) != kinds.VIRT_LAUNCHER[1]:
            continue
        keeps_out = any(isinstance(e, dict) and e.get("key") == kinds.MIGRATION_JOB_LABEL
                        and e.get("operator") == "DoesNotExist" for e in selector.get("matchExpressions") or [])
        if not keeps_out:
            return []
        hooks.append(str(hook.get("name") or "?"))
    return hooks


class OptInCheck:
    """A companion of `serve` (start, stop, degraded): the note while the configuration shuts
    our opt-in key out."""

    def __init__(self, store: Store, key: str, name: str = DEFAULT_CONFIGURATION, *, period: float = 60.0,
                 timeout: float = 5.0, migration_targets: bool = False):
        self.store, self.key, self.name, self.timeout = store, key, name, timeout
        self.migration_targets = migration_targets  # --migration-targets prefer: they must get through too
        self._note = ""
        self._targets_note = ""
        self._checking = Background("opt-in check", self.check, log=log, failure="checking the webhook configuration "
                                    "failed", period=period)

    def start(self) -> None:
        self._checking.start()

    async def stop(self) -> None:
        await self._checking.stop()

    def degraded(self) -> list[str]:
        return [note for note in (self._note, self._targets_note) if note] + self._checking.degraded()

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
        self._targets_note = self._check_targets(configuration or {})
        return note

    def _check_targets(self, configuration: dict[str, Any]) -> str:
        hooks = targets_shut_out(configuration) if self.migration_targets else []
        note = (f"MutatingWebhookConfiguration {self.name}: the objectSelector of {', '.join(hooks)} keeps migration "
                f"target pods out: --migration-targets prefer acts on none (manifests/migration-targets)") if hooks else ""
        if note and note != self._targets_note:
            log.warning("migration targets shut out", extra={"fields": {"configuration": self.name, "webhooks": hooks}})
        return note
