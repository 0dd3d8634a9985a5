import os

# Tests that compare with XLA use JAX's own cpu backend in this process; the
# plugin itself is exercised in subprocesses that choose their platforms.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Compile numba kernels before a program loads, so the tests that check the
# compiled loops run them (interpreter/optimiser/background.py; its own tests turn
# the background thread on).
os.environ.setdefault("PJRT_REF_JIT_BACKGROUND", "0")
# Where the background thread is on, a loop's kernel is queued at its first
# run (tests of the hot threshold set their own).
os.environ.setdefault("PJRT_REF_JIT_HOT_SECONDS", "0")
