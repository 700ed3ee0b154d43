"""What `serve` and `keep` both run on: the event loop and its stop, the ports (probes, metrics), pacing long work."""
