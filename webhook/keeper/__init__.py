"""After placement: keep opted-in VMs next to their storage with targeted live migrations."""
