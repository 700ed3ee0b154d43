"""What placement and keeping both read of pods, VMs and their disks."""
