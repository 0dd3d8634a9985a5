"""Imported once by the workers' fork server: the interpreter, jaxlib's MLIR
bindings and every op family, so each forked worker starts with them loaded.

Any failure is swallowed here (an op module with a syntax error must not
stop the fork server); the workers then meet it again and report it as the
error of each case.
"""
import signal

from .worker import preload

# Ctrl-C is the runner's to handle: it stops the workers itself.
signal.signal(signal.SIGINT, signal.SIG_IGN)
try:
    preload()
except Exception:  # noqa: BLE001
    pass
