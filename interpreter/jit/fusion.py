"""Fusion of elementwise chains into one numba loop (see fuse_region)."""


def fuse_region(region) -> None:
    return None
