"""pjrt-ref: a reference PJRT plugin written in Python."""
__version__ = "0.1.0"
