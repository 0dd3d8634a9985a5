import os
import sys

# Tests that compare with XLA use JAX's own cpu backend in this process; the
# plugin itself is exercised in subprocesses that choose their platforms.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The helpers every folder imports by name (oracle, capi_calls, jax_support, ...).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
