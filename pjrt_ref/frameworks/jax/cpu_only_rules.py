"""Primitives JAX lowers only for the platforms it knows: lowered for "pjrt_ref" as for "cpu".

Most JAX primitives have a default lowering rule, used on any platform. Some
have none, only rules registered for named platforms
(`mlir.register_lowering(p, rule, platform="cpu")`): checkify's `check` (a
host callback on cpu and gpu, an error on tpu), jax.experimental.sparse's
`spsolve` (scipy through a host callback on cpu, cuSPARSE on cuda), sparse's
`csr_spmv`/`csr_spmm` (an FFI call on cpu). JAX cannot know what a plugin's
platform can serve, so it gives the plugin no rule, and the primitive fails
on it with "MLIR translation rule for primitive 'check' not found for
platform pjrt_ref".

pjrt-ref runs what JAX's cpu programs contain (host callbacks through
send/recv, plugin.py; LAPACK custom calls, linalg.py and the interpreter), so
every primitive with a cpu rule and no default rule lowers for "pjrt_ref"
with cpu's rule, as it is. The modules that register such rules do it when
first imported, in any order, some through `jax.interpreters.mlir`'s copy of
`register_lowering`; so the borrowing happens where JAX looks rules up, not
where it registers them: `borrow_cpu_only_rules` makes pjrt_ref's table of
platform rules (`mlir._platform_specific_lowerings["pjrt_ref"]`) a
`RulesBorrowingCpu`, which answers for a primitive it lacks with cpu's rule
when the primitive has no default rule. A rule registered for "pjrt_ref"
itself (linalg.py, the host-callback rules) always wins.
tests/frameworks/test_jax_cpu_only_rules.py imports all of JAX, walks its
registries, and runs such primitives on pjrt_ref and cpu side by side.

The same holds one level up, for code that picks a branch by platform name:
`lax.platform_dependent(x, cpu=..., cuda=...)` without a `default` fails on
a plugin ("MLIR translation rule for primitive 'platform_index(...)' not
found for platform pjrt_ref"). `borrow_cpu_branches` keeps JAX's rule (a
platform's own branch, else the default) and, where it would fail, takes
the cpu branch: pjrt-ref runs what cpu programs contain (jaxlib's own FFI
examples and tests choose their targets this way).

And for serialized programs: an `Exported` (`jax.export`) lowered for
("cpu", "cuda", "tpu") refuses to be called on "pjrt_ref" ("was exported
for platforms ... but it is used on ('pjrt_ref',)"), where cpu runs it.
`borrow_cpu_exports` calls it with its cpu lowering, as cpu would; an export
for platforms without cpu is refused as before.

And for the few default rules that pick a rule by the platform's name and
refuse one they do not know (CPU_CHOICE_OF_DEFAULT_RULE): pjrt_ref's table
lends the rule they pick for cpu.
"""
from __future__ import annotations

import sys


# Primitives whose one (default) rule picks a rule by the platform's name and
# refuses names it does not know (Pallas's `mpmd_map`: "Unsupported platform:
# pjrt_ref"): (module, name) of the rule it picks for cpu.
CPU_CHOICE_OF_DEFAULT_RULE = {"mpmd_map": ("jax._src.pallas.mpmd", "_mpmd_map_fallback_lowering")}


class RulesBorrowingCpu(dict):
    """A platform's lowering rules (primitive -> LoweringRuleEntry) that lends cpu's
    rule for a primitive JAX gave a cpu rule and no default rule, and for one of
    CPU_CHOICE_OF_DEFAULT_RULE the rule its default rule picks for cpu."""

    def __init__(self, own: dict, mlir):
        super().__init__(own)
        self._mlir = mlir

    def borrowed(self, primitive):
        """cpu's rule entry for `primitive` if it is cpu-only, else None."""
        default = self._mlir._lowerings.get(primitive)
        if default is not None:
            return self._cpu_choice(primitive, default)
        return self._mlir._platform_specific_lowerings.get("cpu", {}).get(primitive)

    def _cpu_choice(self, primitive, default):
        """The entry of the rule `default` picks for cpu, for a CPU_CHOICE_OF_DEFAULT_RULE
        primitive whose module is loaded (it is, once JAX lowers it); else None."""
        module_name, name = CPU_CHOICE_OF_DEFAULT_RULE.get(primitive.name, (None, None))
        rule = getattr(sys.modules.get(module_name), name, None) if module_name else None
        return None if rule is None else self._mlir.LoweringRuleEntry(rule, default.inline)

    def __contains__(self, primitive) -> bool:
        return dict.__contains__(self, primitive) or self.borrowed(primitive) is not None

    def __missing__(self, primitive):
        entry = self.borrowed(primitive)
        if entry is None:
            raise KeyError(primitive)
        return entry

    def get(self, primitive, default=None):
        return self[primitive] if primitive in self else default


def borrow_cpu_only_rules(platform: str) -> None:
    """Make `platform`'s rule table lend cpu's rules for cpu-only primitives."""
    from jax._src.interpreters import mlir

    table = mlir._platform_specific_lowerings
    if not isinstance(table.get(platform), RulesBorrowingCpu):
        table[platform] = RulesBorrowingCpu(table.get(platform, {}), mlir)


def cpu_only_primitives_without_rule(platform: str) -> list:
    """Primitives with a cpu rule, no default rule and no rule for `platform` (the test's question)."""
    from jax._src.interpreters import mlir

    ours = mlir._platform_specific_lowerings.get(platform, {})
    return [primitive for primitive in mlir._platform_specific_lowerings.get("cpu", {})
            if primitive not in mlir._lowerings and primitive not in ours]


def borrow_cpu_branches(platform: str) -> None:
    """Lower the two primitives that choose by platform for `platform` so that
    it gets its own branch, else the default, else the cpu branch:
    `platform_index` (which branch) and `cond` with `branches_platforms`
    (which branches to keep), both JAX's rules on amended platform lists."""
    from jax._src.interpreters import mlir
    from jax._src.lax.control_flow import conditionals

    index_rule, cond_rule = conditionals._platform_index_lowering, conditionals._cond_lowering

    def platform_index_lowering(ctx, *, platforms):
        return index_rule(ctx, platforms=_cpu_branches_also_for(platform, platforms))

    def cond_lowering(ctx, index, *args, **params):
        if params.get("branches_platforms") is not None:
            params = {**params, "branches_platforms": _cpu_branches_also_for(
                platform, params["branches_platforms"])}
        return cond_rule(ctx, index, *args, **params)

    mlir.register_lowering(conditionals.platform_index_p, platform_index_lowering, platform=platform)
    mlir.register_lowering(conditionals.cond_p, cond_lowering, platform=platform)


def _cpu_branches_also_for(platform: str, platforms: tuple) -> tuple:
    """`platforms` (a tuple per branch of platform names, None for the default)
    with `platform` added to the cpu branches, unless a branch already names
    it or there is a default (which JAX gives every platform not named)."""
    if any(ps is None or platform in ps for ps in platforms):
        return platforms
    return tuple(ps + (platform,) if "cpu" in ps else ps for ps in platforms)


def borrow_cpu_exports(platform: str) -> None:
    """Call an `Exported` that was lowered for cpu and not for `platform` on
    `platform` with its cpu lowering (JAX's rule, told the caller is cpu)."""
    from jax._src.export import _export
    from jax._src.interpreters import mlir

    rule = _export._call_exported_lowering

    def call_exported_lowering(ctx, *args, exported):
        platforms = ctx.module_context.platforms
        if platform not in platforms or platform in exported.platforms or "cpu" not in exported.platforms:
            return rule(ctx, *args, exported=exported)
        as_cpu = tuple("cpu" if p == platform else p for p in platforms)
        cpu_ctx = ctx.replace(module_context=ctx.module_context.replace(platforms=as_cpu))
        results = rule(cpu_ctx, *args, exported=exported)
        if cpu_ctx.tokens_out is not None:      # an export with ordered effects threads tokens
            ctx.set_tokens_out(cpu_ctx.tokens_out)
        return results

    mlir.register_lowering(_export.call_exported_p, call_exported_lowering, platform=platform)
