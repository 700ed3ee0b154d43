"""Whether a running VM is moved: where it runs, apart or not, migrations, the target pod, the keeper's decision."""
