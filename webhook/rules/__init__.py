"""Pure rules, no I/O: `placement`, `keeping`, kube-scheduler's filters (`fit`), what KubeVirt makes of a
VM's pods (`kubevirt`) and what they all share (`shared`)."""
