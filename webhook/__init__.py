"""kubevirt-colocate: put KubeVirt VMs on the node of their Longhorn share-manager."""

__version__ = "0.3.0"
