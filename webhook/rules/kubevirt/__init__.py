"""What KubeVirt makes of a VM's pods (its own, started again, its migration target): both roles judge by it."""
