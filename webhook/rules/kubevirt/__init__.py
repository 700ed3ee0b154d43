"""What KubeVirt makes of a VM's pods, which placement and keeping both judge by: a VMI's own
pods, its pod as started again, the migration target pod."""
