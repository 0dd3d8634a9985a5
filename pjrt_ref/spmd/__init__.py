"""The SPMD partitioner: one program, many devices.

`partitioner.make_partitioned_runner` runs a program partitioned over
replicas and partitions, from its GSPMD (`gspmd.py`) or Shardy shardings
(`layout.py` reads both), with manual regions (shard_map, `manual.py`) run
per device and unreduced values (`unreduced.py`). It uses the interpreter
and is used by the object model's multi-device execution.
"""
