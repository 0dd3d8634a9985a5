"""Side-by-side timing of pjrt-ref against XLA CPU and the StableHLO
reference interpreter (issue 4). Run `python -m benchmarks --help`."""
