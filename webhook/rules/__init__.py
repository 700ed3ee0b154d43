"""Pure rules: which pods we act on, the facts they follow, the decision, the patch. No I/O."""
