"""NodePorts (kubernetes `nodeports/node_ports.go`): the host ports a pod takes, and whether a node has them free."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .fields import Unreadable, as_list, as_mapping, name_of, pod_spec
from .framework import never_raises

if TYPE_CHECKING:
    from .demand import Demand
    from .view import View

WILDCARD_IP = "0.0.0.0"

HostPort = tuple[str, str, int]  # (hostIP, protocol, port)


def host_ports(pod: Any) -> tuple[HostPort, ...]:
    """Host ports of the containers and sidecars (scheduler/util `GetHostPorts`), with the
    defaults the scheduler applies: protocol TCP, hostIP 0.0.0.0 meaning every address; with
    hostNetwork a containerPort is also the hostPort (apiserver `defaultHostNetworkPorts`)."""
    spec = pod_spec(pod)
    host_network = spec.get("hostNetwork") is True
    found: list[HostPort] = []
    containers = [c for c in as_list(spec.get("initContainers"), "initContainers")
                  if isinstance(c, dict) and c.get("restartPolicy") == "Always"] if spec.get("initContainers") is not None else []
    containers += as_list(spec.get("containers"), "containers")
    for container in containers:
        ports = container.get("ports") if type(container) is dict else as_mapping(container, "container").get("ports")
        if ports is None:
            continue  # most containers declare none
        for port in as_list(ports, "ports"):
            port = as_mapping(port, "port")
            number = port.get("hostPort") or (port.get("containerPort") if host_network else None)
            if number is None:
                continue
            if isinstance(number, bool) or not isinstance(number, int):
                raise Unreadable(f"hostPort {number!r} is not a number")
            if number > 0:
                ip, protocol = port.get("hostIP") or WILDCARD_IP, port.get("protocol") or "TCP"
                if not isinstance(ip, str) or not isinstance(protocol, str):
                    raise Unreadable(f"hostPort {number} has a malformed hostIP or protocol")
                found.append((ip, protocol, number))
    return tuple(found)


@never_raises
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


