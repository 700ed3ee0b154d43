"""What the tests share: realistic objects and checks of them, stores on the kmock emulator, KubeVirt's
API played there, the chart under Helm, the admission policy evaluated."""
