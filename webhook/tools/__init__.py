"""Tools an admin runs: explain a VM, make certificates."""
