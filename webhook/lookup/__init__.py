"""The rules' questions asked of a Store, for both roles and the tools (memory first, the API within
the deadline): a VM's disks, a volume's consumers, a migration target, a disk's I/O path."""
