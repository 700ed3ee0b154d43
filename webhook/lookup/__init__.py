"""The rules' questions asked of a Store, for both roles and the tools: a VM's disks and their
nodes, the consumers of a volume, a migration target and whether a node can take it (memory
first, the API within the deadline), and a disk's I/O path through Longhorn's objects."""
