"""I/O with the Kubernetes API: the client, the Store protocol, a snapshot, direct reads, watch caches."""
