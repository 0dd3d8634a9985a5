"""The plugin test kit: JAX's test suite against any PJRT plugin, each failure traced to its cause.

`pjrt-ref jax-tests CHECKOUT [FILES|--all] --plugin NAME=PATH.so` runs
JAX's tests on XLA's cpu backend and on the plugin (loaded as JAX loads any
plugin), then, for every test that passes on cpu and fails on the plugin,
keeps what reproduces it without JAX (its programs, compile options and
argument values, recorded at the PJRT C API by a proxy library), replays
each execution on cpu and on the plugin, names the first op whose result
differs (`pjrt-ref diff`), and sorts the failures by cause into
`report.md` and `report.html`, the cause that explains the most tests
first. kit.py is the run; the other modules are its steps.
"""
