"""JAX's layout API on pjrt_ref, side by side with JAX's cpu backend (the oracle):
the layouts JAX reports for arrays and compiled functions, and the values."""
from __future__ import annotations

import pytest

from tests.support.jax_support import run_on_cpu_and_pjrt_ref

PROGRAMS = {
    "device_put_concrete_layout": """
def run(devices):
    s = SingleDeviceSharding(devices[0])
    x = np.arange(8 * 128, dtype=np.int32).reshape(8, 128)
    out = []
    for order in ((1, 0), (0, 1)):
        y = jax.device_put(x, Format(Layout(major_to_minor=order), s))
        out.append([y.format.layout.major_to_minor, np.asarray(y).tolist() == x.tolist()])
    return out
""",
    "jit_with_concrete_formats": """
def run(devices):
    s = SingleDeviceSharding(devices[0])
    fmt = Format(Layout(major_to_minor=(1, 0)), s)
    x = jax.device_put(np.arange(24, dtype=np.float32).reshape(4, 6), fmt)
    f = jax.jit(lambda a: a * 2 + 1, in_shardings=fmt, out_shardings=fmt)
    y = f(x)
    z = jax.jit(lambda a: a.sum(axis=0))(y)
    compiled = f.lower(x).compile()
    return [y.format.layout.major_to_minor, compiled.input_formats[0][0].layout.major_to_minor,
            compiled.output_formats.layout.major_to_minor, np.asarray(y).tolist(), np.asarray(z).tolist()]
""",
    "auto_layouts_of_transposes": """
def run(devices):
    s = SingleDeviceSharding(devices[0])
    sds = jax.ShapeDtypeStruct((16, 8, 4), np.int32, sharding=s)
    f = jax.jit(lambda a: (a.transpose(2, 0, 1), jnp.swapaxes(a.T, 0, 1), a + 1),
                in_shardings=Format(Layout.AUTO), out_shardings=Format(Layout.AUTO))
    compiled = f.lower(sds).compile()
    x = jax.device_put(np.arange(16 * 8 * 4, dtype=np.int32).reshape(16, 8, 4), compiled.input_formats[0][0])
    results = compiled(x)
    return [compiled.input_formats[0][0].layout.major_to_minor,
            [o.layout.major_to_minor for o in compiled.output_formats],
            [r.format.layout.major_to_minor for r in results],
            [np.asarray(r).tolist() for r in results]]
""",
    "sharding_constraint_with_layout": """
def run(devices):
    s = SingleDeviceSharding(devices[0])
    @jax.jit
    def f(x):
        return jax.lax.with_sharding_constraint(x.T * 3, Format(Layout(major_to_minor=(0, 1)), s))
    y = f(jax.device_put(np.arange(32, dtype=np.int32).reshape(4, 8), s))
    return [y.format.layout.major_to_minor, np.asarray(y).tolist()]
""",
}

PRELUDE = """
from jax.experimental.layout import Format, Layout
from jax.sharding import SingleDeviceSharding
"""


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_layouts_and_values_are_cpu_s(name):
    results = run_on_cpu_and_pjrt_ref(PROGRAMS[name], prelude=PRELUDE)
    assert results["pjrt_ref"] == results["cpu"]
