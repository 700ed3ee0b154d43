"""I/O with the Kubernetes API, knowing no rule: the client, list/watch into tables, Events, raw calls."""
