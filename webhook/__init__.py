"""kubevirt-colocate: put KubeVirt VMs on the node of their Longhorn share-manager."""

__version__ = "0.1.0"
