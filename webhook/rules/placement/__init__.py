"""Where a pod is placed: the decision, the patch and its inverse."""
