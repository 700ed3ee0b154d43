"""NodePorts (kubernetes `nodeports/node_ports.go`): whether a node has the host ports a pod takes (`terms`) free."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .demand import Demand
from .fields import name_of
from .terms import WILDCARD_IP
from .view import View


def node_ports(demand: Demand, node: Mapping[str, Any], view: View, subject: str = "the VM") -> str | None:
    """NodePorts: a host port is taken when the node's pods hold it on the same address, or
    either side binds every address (0.0.0.0) (kube-scheduler framework `HostPortInfo.CheckConflict`)."""
    if not demand.host_ports:
        return None
    name = name_of(node)
    usage = view.usage(name)
    for ip, protocol, port in demand.host_ports:
        if ip == WILDCARD_IP:
            taken = usage.any_ip_ports.get((protocol, port), 0) > 0
        else:
            taken = usage.ports.get((WILDCARD_IP, protocol, port), 0) > 0 or usage.ports.get((ip, protocol, port), 0) > 0
        if taken:
            where = "" if ip == WILDCARD_IP else f" on {ip}"
            return f"node {name} has host port {port}/{protocol}{where} in use, which {subject} needs"
    return None
