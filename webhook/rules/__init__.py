"""Pure rules, no I/O: `placement`, `keeping`, kube-scheduler's filters (`fit`) and what they share (`shared`)."""
