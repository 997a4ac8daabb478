"""ntg-testbed orchestration: the run lifecycle, the step executor, parts, methods, endpoint back
ends, the IDS side and the `testbed` command line (docs/architecture.md)."""
