"""Whether a running VM is moved: where it runs, apart or not, migrations, the keeper's decision."""
