"""What placement and keeping both read: which pods the rules act on, the facts a pod follows, times,
typed fields, quantities, pruning of nested objects."""
