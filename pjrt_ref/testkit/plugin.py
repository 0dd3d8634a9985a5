"""The plugin under test: how JAX loads it, what it says it is, and how the kit records it.

A plugin author names the library as JAX users do,
`PJRT_NAMES_AND_LIBRARY_PATHS=NAME:PATH` (JAX's `register_plugin`). The
kit asks it once, in a process of its own, which platform its client
reports and how many devices it has. A plugin that calls itself "cpu"
takes JAX's cpu lowerings (LAPACK custom calls, say) and is the only
backend of its runs: with jaxlib's own cpu beside it, a test's
`jax.devices("cpu")` would run on jaxlib's cpu and not on the plugin (such
a test fails with "Unknown backend cpu", a cause of its own in the
report). One with a platform of its own runs beside JAX's cpu backend, as
pjrt_ref does (`JAX_PLATFORMS=NAME,cpu`: host callbacks and
`jax.devices("cpu")` in tests still work).

For the recording run, JAX loads the recording proxy under the same name,
and the proxy loads the plugin (capi_shim/recording_proxy.c).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

from pjrt_ref import recording_proxy_path


# Seconds the plugin may take to load and list its devices.
LOAD_TIMEOUT = 300.0

_PROBE = """
import json, jax
devices = jax.devices()
print("PLUGIN-PROBE " + json.dumps({"platform": devices[0].platform, "devices": len(devices),
                                    "version": devices[0].client.platform_version}))
"""


@dataclass(frozen=True)
class PluginUnderTest:
    """`--plugin NAME=PATH`, and what loading it said: its platform, or why it did not load."""
    name: str
    path: str
    platform: str = ""
    version: str = ""
    devices: int = 0
    load_error: str = ""

    @property
    def loaded(self) -> bool:
        return not self.load_error

    @property
    def platforms(self) -> str:
        """JAX_PLATFORMS for its runs."""
        return self.name if self.platform == "cpu" else f"{self.name},cpu"


def parse_plugin(text: str) -> PluginUnderTest:
    """`NAME=PATH.so` (a bare path is named after its file)."""
    name, _, path = text.rpartition("=")
    if not name:
        name = os.path.basename(path).split(".")[0].removeprefix("lib").replace("-", "_") or "plugin"
    if not name.isidentifier():
        raise ValueError(f"--plugin {text}: the name must be a Python identifier (JAX's platform names are)")
    return PluginUnderTest(name, os.path.abspath(path))


def environment(plugin: PluginUnderTest, base: dict[str, str]) -> dict[str, str]:
    """`base` with JAX loading the plugin under its name."""
    env = dict(base)
    env["PJRT_NAMES_AND_LIBRARY_PATHS"] = f"{plugin.name}:{plugin.path}"
    env["JAX_PLATFORMS"] = plugin.platforms or plugin.name
    return env


def recording_environment(plugin: PluginUnderTest, base: dict[str, str], directory: str) -> dict[str, str]:
    """`environment`, with the recording proxy in the plugin's place writing to `directory`."""
    env = environment(plugin, base)
    env["PJRT_NAMES_AND_LIBRARY_PATHS"] = f"{plugin.name}:{recording_proxy_path()}"
    env["PJRT_REF_RECORD_PLUGIN"] = plugin.path
    env["PJRT_REF_RECORD_DIR"] = directory
    return env


def probe(plugin: PluginUnderTest, base: dict[str, str], timeout: float = LOAD_TIMEOUT) -> PluginUnderTest:
    """Load the plugin in a process of its own: its platform, or why it cannot be loaded."""
    env = environment(plugin, base)
    env["JAX_PLATFORMS"] = plugin.name
    if not os.path.isfile(plugin.path):
        return _failed(plugin, f"no such file: {plugin.path}")
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return _failed(plugin, f"loading it did not finish within {timeout:g} s")
    for line in done.stdout.splitlines():
        if line.startswith("PLUGIN-PROBE "):
            said = json.loads(line.split(" ", 1)[1])
            return PluginUnderTest(plugin.name, plugin.path, said["platform"], str(said["version"]), said["devices"])
    lines = [line for line in (done.stderr or "").splitlines() if line.strip()]
    why = lines[-1].strip() if lines else f"exit status {done.returncode}"
    if done.returncode < 0:
        why = f"the process died of signal {-done.returncode} ({why})"
    return _failed(plugin, why[:500])


def _failed(plugin: PluginUnderTest, why: str) -> PluginUnderTest:
    return PluginUnderTest(plugin.name, plugin.path, load_error=why)
