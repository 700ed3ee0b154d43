"""Where a pod is placed: which pods, the facts they follow, the decision, the patch and its inverse."""
