"""PJRT_Plugin_* entry points (pjrt_c_api.h "Plugin")."""
from __future__ import annotations

from functools import lru_cache

from pjrt_ref.capi._boundary import entry_point
from pjrt_ref.capi.cdata import Args, owned_named_values


class _Plugin:
    """Owner of the plugin-wide C data (the attribute list)."""


PLUGIN = _Plugin()


@lru_cache(maxsize=1)
def plugin_attributes() -> dict:
    """What JAX reads: the StableHLO version range our parser accepts.

    JAX serializes programs as portable artifacts targeting
    `stablehlo_current_version`. The versions come from the same jaxlib whose
    MLIR bindings parse the program (already loaded when JAX is the host).
    """
    from jaxlib.mlir._mlir_libs import _stablehlo

    def parse(text: str) -> list[int]:
        return [int(part) for part in text.split(".")]

    return {
        "stablehlo_current_version": parse(_stablehlo.get_current_version()),
        "stablehlo_minimum_version": parse(_stablehlo.get_minimum_version()),
    }


@entry_point("PJRT_Plugin_Initialize")
def plugin_initialize(args: Args) -> None:
    """PJRT_Plugin_Initialize: nothing to set up; Python is already running."""


@entry_point("PJRT_Plugin_Attributes")
def plugin_attributes_entry(args: Args) -> None:
    """PJRT_Plugin_Attributes: named values owned by the plugin."""
    array, count = owned_named_values(PLUGIN, "attributes", plugin_attributes())
    args.attributes = array
    args.num_attributes = count
