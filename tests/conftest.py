import os
import sys

# Tests that compare with XLA use JAX's own cpu backend in this process; the
# plugin itself is exercised in subprocesses that choose their platforms.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(__file__))
