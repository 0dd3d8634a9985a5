"""`pjrt-ref jax-tests ... --plugin NAME=PATH.so`: JAX's suite runner, with a plugin under test in pjrt_ref's place.

The runner (frameworks/jax/suite.py) knows cpu and pjrt_ref; this adds the
options `--plugin` and `--report`, loads the plugin once to learn what it
is (plugin.py, `probe`), gives its runs pjrt_ref's environment with the
plugin loaded instead, and after the two runs hands them to the kit
(kit.py). Without `--plugin`, the command is the runner unchanged.
"""
from __future__ import annotations

import argparse
import dataclasses
import os

from pjrt_ref.frameworks import suite_runner
from pjrt_ref.frameworks.jax import suite as jax_suite
from pjrt_ref.testkit import kit
from pjrt_ref.testkit.plugin import PluginUnderTest, environment as plugin_environment, parse_plugin, probe


def add_options(parser: argparse.ArgumentParser) -> None:
    jax_suite.add_options(parser)
    parser.add_argument("--plugin", metavar="NAME=PATH.so",
                        help="test this PJRT plugin instead of pjrt_ref, and for every test that passes on cpu "
                             "and fails on it keep the programs and arguments, name the first op that "
                             "differs and sort the failures by cause (the plugin test kit)")
    parser.add_argument("--report", metavar="DIR",
                        help="with --plugin: where the kit writes report.md, report.html and one folder "
                             "per failing test (default: plugin-kit-NAME)")


def environment(backend: str, options: argparse.Namespace) -> dict[str, str]:
    plugin = getattr(options, "plugin", None)
    if isinstance(plugin, PluginUnderTest) and backend == plugin.name:
        return plugin_environment(plugin, jax_suite.environment("pjrt_ref", options))
    return jax_suite.environment(backend, options)


def candidate(options: argparse.Namespace) -> suite_runner.Candidate | None:
    """The plugin under test, loaded once to learn its platform (or why it does not load)."""
    if not options.plugin:
        return None
    if isinstance(options.plugin, str):
        options.plugin = probe(parse_plugin(options.plugin), jax_suite.environment("cpu", options))
        options.report = os.path.abspath(options.report or f"plugin-kit-{options.plugin.name}")
    plugin = options.plugin
    cannot_run = "" if plugin.loaded else f"the plugin does not load: {plugin.load_error}"
    return suite_runner.Candidate(plugin.name, cannot_run, after_runs=kit.run)


SUITE = dataclasses.replace(jax_suite.SUITE, add_options=add_options, environment=environment,
                            candidate=candidate)


def main(argv: list[str] | None = None) -> int:
    return suite_runner.main(SUITE, argv)
