"""`python -m webhook.keeper`: the keeper's process, as `serve` starts it for a term as leader
(process.py, child.py). Not a command for people: it reads its orders from `serve` on stdin."""
from .child import child_main

if __name__ == "__main__":
    child_main()
