"""A fake Kubernetes for the tests and the benchmark: realistic Kubernetes, Longhorn and KubeVirt
objects (`kubefake.objects`) and the apiserver's writes kmock leaves out (`kubefake.apiserver`).

Installed with the project for development (pyproject's package discovery) but not shipped:
the image installs the webhook package alone.
"""
