"""A fake Kubernetes for the tests and the benchmark: realistic Kubernetes, Longhorn and KubeVirt
objects (`kubefake.objects`), an apiserver's reads and writes over kmock's public object store
(`kubefake.apiserver`), with what kmock's own emulator leaves out; what KubeVirt's components
write, at a test's moments (`kubefake.kubevirt`: virt-api's pause and unpause;
`kubefake.virt_handler` and `kubefake.io_error_retry`: a VM paused on an I/O error and
virt-handler's retry, `kubefake.virt_launcher` playing them over time as virt-launcher tells its
Event on every callback while paused; `kubefake.recorder`: client-go's event recorder;
`kubefake.migration`: a live migration's end and the garbage collection of
finished ones), and Longhorn's (`kubefake.longhorn`); where kube-scheduler would place a pod
(`kubefake.scheduler`, for the benchmark's simulated cluster). And the real thing beside it:
etcd, kube-apiserver and kube-scheduler started from envtest's binaries (`kubefake.envtest`), for
what only a real apiserver judges.

Installed with the project for development (pyproject's package discovery) but not shipped:
the image installs the webhook package alone.
"""
