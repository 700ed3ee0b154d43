"""What both processes run on, `serve` and `keep` alike: the event loop, signals and a graceful
stop, the ports and the operations port (probes, metrics), and pacing long work on the loop."""
