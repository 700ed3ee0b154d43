"""Pure: would kube-scheduler's filters pass this pod on this node? (A pin must never strand a VM.)

One module per filter plugin, named after it; each answers None (passes) or a reason, and "cannot tell"
counts as does-not-fit: a pin is only safe when we know.
"""
from .checks import judged_by_room, prefilter, refused_only, why_not_fit, why_not_pass, why_not_run
from .resources import node_resources_fit
from .requests import pod_requests
from .usage import PodUsage, Usage
from .interpodaffinity import may_refuse
from .terms import anti_affinity_keys, keys_toward
from .view import INDEXED_LABELS, StaticView, View, bound_node, has_required_anti_affinity, takes_room_only

__all__ = ["INDEXED_LABELS", "PodUsage", "StaticView", "Usage", "View", "anti_affinity_keys", "bound_node", "has_required_anti_affinity",
           "judged_by_room", "keys_toward", "may_refuse", "node_resources_fit", "pod_requests", "prefilter", "refused_only",
           "takes_room_only", "why_not_fit", "why_not_pass", "why_not_run"]
