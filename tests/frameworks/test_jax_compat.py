"""What JAX's own test suite found pjrt_ref doing differently from XLA CPU (issue 12).

Each test runs JAX on `pjrt_ref,cpu` in a child process and checks one cause;
the project's suite must not need JAX's checkout, so the cases are restated
here in a few lines each.
"""
from __future__ import annotations

from tests.support.jax_support import run_jax

PJRT_REF_AND_CPU = {"JAX_PLATFORMS": "pjrt_ref,cpu"}


def test_programs_without_results_compile_and_run():
    """A jit with no outputs (None, or only a debug print) asks for zero output memory kinds."""
    proc = run_jax("""
        assert jax.jit(lambda x: None)(jnp.ones(3)) is None
        jax.jit(lambda x: jax.debug.print("x={x}", x=x))(jnp.arange(3.0))
        assert float(jax.grad(lambda x: (x ** 2).sum())(jnp.ones(3))[0]) == 2.0
        print("done")
    """, **PJRT_REF_AND_CPU)
    assert "x=[0. 1. 2.]" in proc.stdout and "done" in proc.stdout


def test_host_buffers_with_negative_strides():
    """A flipped numpy view (negative byte strides) is copied as XLA copies it."""
    run_jax("""
        dev = jax.devices("pjrt_ref")[0]
        x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
        for view in (x[::-1], x[:, ::-1, ::2], x[::-1, :, ::-1].transpose(2, 0, 1), x[::-1, ::-1, ::-1]):
            assert view.strides != np.ascontiguousarray(view).strides
            got = np.asarray(jax.device_put(view, dev))
            assert np.array_equal(got, view), (view.strides, got)
        print("ok")
    """, **PJRT_REF_AND_CPU)


def test_dce_sink_and_index_typed_layout_attributes():
    """`lax.dce_sink(..., prevent_mlir_dce=True)` lowers to a custom call whose
    `operand_layouts` attribute has `index` elements."""
    run_jax("""
        from jax import lax
        def f(x):
            lax.dce_sink(jnp.sin(x), prevent_mlir_dce=True)
            return x * 2
        assert float(jax.jit(f)(1.5)) == 3.0
        print("ok")
    """, **PJRT_REF_AND_CPU)


def test_compiler_options_are_checked_as_xla_checks_them():
    """Known XLA options are accepted (and ignored); unknown names and values
    of the wrong type are refused with XLA's messages."""
    proc = run_jax("""
        f = jax.jit(lambda x: jnp.sqrt(x ** 2) + 1.0)
        lowered = f.lower(1.0)
        lowered.compile(compiler_options={"xla_embed_ir_in_executable": True,
                                          "xla_dump_max_hlo_modules": 200,
                                          "xla_gpu_auto_spmd_partitioning_memory_budget_ratio": 0.5,
                                          "xla_dump_to": "/nonexistent"})
        jax.jit(lambda x: x + 1, compiler_options={"exec_time_optimization_effort": 0.0})(1.0)
        for options in ({"invalid_key": "invalid_value"}, {"xla_embed_ir_in_executable": "invalid_value"},
                        {"xla_dump_max_hlo_modules": 2.5}, {"exec_time_compilation_effort": 0.0}):
            try:
                lowered.compile(compiler_options=options)
                print("accepted", options)
            except jax.errors.JaxRuntimeError as error:
                print(str(error).splitlines()[0])
    """, **PJRT_REF_AND_CPU)
    assert proc.stdout.splitlines() == [
        "INVALID_ARGUMENT: No such compile option: 'invalid_key'",
        "INVALID_ARGUMENT: While setting option xla_embed_ir_in_executable, 'invalid_value' is not a valid bool value.",
        "INVALID_ARGUMENT: While setting option xla_dump_max_hlo_modules, '2.5' is not a valid int32 value.",
        "INVALID_ARGUMENT: No such compile option: 'exec_time_compilation_effort'",
    ]


def test_each_result_buffer_owns_its_memory():
    """As on XLA, a result never shares memory with an argument or another
    result (an identity jit, jnp.array(copy=True), duplicated outputs)."""
    run_jax("""
        x = jnp.array([1, 2, 3])
        pointer = lambda a: a.unsafe_buffer_pointer()
        assert pointer(jax.jit(lambda x: x)(x)) != pointer(x)
        assert pointer(jax.jit(lambda x: x.reshape(3, 1))(x)) != pointer(x)
        assert pointer(jnp.array(x, copy=True)) != pointer(x)
        z1, z2 = jax.jit(lambda x: (x, x))(x)
        assert pointer(z1) != pointer(z2) and z1.tolist() == z2.tolist() == [1, 2, 3]
        print("ok")
    """, **PJRT_REF_AND_CPU)


def test_donating_a_buffer_also_passed_again_is_refused():
    proc = run_jax("""
        f = jax.jit(lambda x, y: x + y, donate_argnums=(0,))
        x = jnp.zeros((10,), jnp.float32)
        try:
            f(x, x).block_until_ready()
        except RuntimeError as error:
            print("refused:", str(error).splitlines()[0])
        print("still readable:", float(x.sum()))
        y = jnp.ones((10,), jnp.float32)
        print(float(f(y, x).sum()), y.is_deleted())
    """, **PJRT_REF_AND_CPU)
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("refused: INVALID_ARGUMENT: argument 0 is donated and also passed as argument 1")
    assert lines[1:] == ["still readable: 0.0", "10.0 True"]


def test_a_token_buffer_is_not_an_array():
    proc = run_jax("""
        token = jax.lax.create_token()
        try:
            token._buf._value
        except RuntimeError as error:
            print(str(error).splitlines()[0])
        _, out = jax.jit(lambda a, t: (a, t))(jnp.ones(3), token)
        print(type(out).__name__)
    """, **PJRT_REF_AND_CPU)
    assert proc.stdout.splitlines() == [
        "INVALID_ARGUMENT: Cannot convert a token-shape buffer to a numpy array.", "Token"]


def test_complex_cosh_and_sinh_through_the_plugin_give_xlas_special_values():
    # JAX hands plugins chlo.cosh/sinh as a composite whose decomposition is
    # built from stablehlo.exponential; with C99's cexp, cosh(-inf + inf i)
    # came out inf + NaN i where XLA CPU (and JAX's accuracy test) give NaN + NaN i.
    run_jax("""
        parts = [-np.inf, -3.0, 0.0, 3.0, np.inf, np.nan]
        z = np.array([complex(a, b) for a in parts for b in parts], np.complex64)
        for f in (jnp.cosh, jnp.sinh, jnp.exp):
            ours = np.asarray(jax.jit(f)(jax.device_put(z, jax.devices("pjrt_ref")[0])))
            xla = np.asarray(jax.jit(f)(jax.device_put(z, jax.devices("cpu")[0])))
            for part in ("real", "imag"):
                a, b = getattr(ours, part), getattr(xla, part)
                assert np.array_equal(np.isnan(a), np.isnan(b)), (f, part, z[np.isnan(a) != np.isnan(b)])
                np.testing.assert_allclose(a, b, rtol=1e-6, atol=0)
    """, JAX_PLATFORMS="pjrt_ref,cpu")
