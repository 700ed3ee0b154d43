"""What placement and keeping both read: times, typed fields, quantities, records, pruning of nested objects."""
