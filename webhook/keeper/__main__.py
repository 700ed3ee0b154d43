"""`python -m webhook.keeper`: the keeper's process, as `serve` starts it for a term as leader
(process.py, child.py). Not a command for people: it reads its orders from `serve` on stdin."""
import contextlib
import os
import signal

NICENESS = 10  # added to serve's: the keeper's work yields the CPU to admission

if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C reaches serve, which stops us in turn
    with contextlib.suppress(OSError):
        os.nice(NICENESS)  # before the imports, most of a start's CPU
    from .child import child_main

    child_main()
