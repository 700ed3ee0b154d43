"""What the pods bound to a node take from it: requests, pod slots, host ports."""
from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from typing import Any

from .requests import pod_requests
from .terms import HostPort, host_ports


@dataclasses.dataclass(frozen=True, slots=True)
class PodUsage:
    """What one bound pod takes from its node; keep it to remove exactly what was added."""

    requests: Mapping[str, int]
    host_ports: tuple[HostPort, ...] = ()
    readable: bool = True

    @classmethod
    def of(cls, pod: Any) -> "PodUsage":
        """A pod we cannot read still takes its slot, and makes its node's room unknown."""
        try:
            return cls(pod_requests(pod, running=True), host_ports(pod))
        except (ValueError, TypeError, AttributeError):
            return cls({}, (), readable=False)


@dataclasses.dataclass(slots=True, eq=False)
class Usage:
    """What the pods bound to one node take: requests, pod slots, host ports (a cache keeps one
    per node, adding each bound pod that has not finished and removing it when it goes)."""

    requested: dict[str, int] = dataclasses.field(default_factory=dict)
    pods: int = 0
    ports: Counter[HostPort] = dataclasses.field(default_factory=Counter)
    any_ip_ports: Counter[tuple[str, int]] = dataclasses.field(default_factory=Counter)  # (protocol, port), any address
    unreadable: int = 0

    def add(self, pod: PodUsage) -> None:
        self._change(pod, 1)

    def remove(self, pod: PodUsage) -> None:
        self._change(pod, -1)

    def _change(self, pod: PodUsage, sign: int) -> None:
        self.pods += sign
        for name, amount in pod.requests.items():
            left = self.requested.get(name, 0) + sign * amount
            if left:
                self.requested[name] = left
            else:
                self.requested.pop(name, None)
        for ip, protocol, port in pod.host_ports:
            self.ports[(ip, protocol, port)] += sign
            self.any_ip_ports[(protocol, port)] += sign
        if sign < 0 and pod.host_ports:
            self.ports = +self.ports  # drop what fell to zero
            self.any_ip_ports = +self.any_ip_ports
        if not pod.readable:
            self.unreadable += sign
