"""Where the rules' facts come from: the Store protocol and its answerers (watch caches, a snapshot, direct reads)."""
