"""User XLA FFI handlers on pjrt_ref: `jax.ffi.register_ffi_target(...,
platform="pjrt_ref")` then `jax.ffi.ffi_call` (interpreter/ffi,
pjrt_ref/capi/ffi_extension.py, pjrt_ref/frameworks/jax/ffi.py).

The handlers (tests/data/ffi_handlers/handlers.cc) are compiled here with the
system C++ compiler against jaxlib's headers; without one the tests skip.
Each check runs JAX in a child process (a crash fails one test), and values
are compared with numpy or with the same handler on JAX's cpu backend.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import textwrap

import pytest

from tests.support.jax_support import run_jax

HANDLERS_SOURCE = os.path.join(os.path.dirname(__file__), "..", "data", "ffi_handlers", "handlers.cc")
COMPILER = shutil.which("g++") or shutil.which("c++")

pytestmark = pytest.mark.skipif(COMPILER is None, reason="no C++ compiler to build the FFI handlers")

# What every child runs first: the handler library and a registration helper.
PRELUDE = """
import ctypes, os
handlers = ctypes.cdll.LoadLibrary(os.environ["FFI_HANDLERS"])

def register(name, symbol=None, platform="pjrt_ref", **kwargs):
    capsule = jax.ffi.pycapsule(getattr(handlers, symbol or name))
    jax.ffi.register_ffi_target(name, capsule, platform=platform, **kwargs)

pjrt_ref = jax.devices("pjrt_ref")[0]
"""


@pytest.fixture(scope="module")
def handlers(tmp_path_factory) -> str:
    import jax
    library = str(tmp_path_factory.mktemp("ffi") / "libhandlers.so")
    subprocess.run([COMPILER, "-std=c++17", "-O1", "-shared", "-fPIC", "-pthread", "-w",
                    f"-I{jax.ffi.include_dir()}", HANDLERS_SOURCE, "-o", library], check=True)
    return library


def run(handlers: str, code: str, platforms: str = "pjrt_ref", **env: str) -> str:
    return run_jax(PRELUDE + textwrap.dedent(code), JAX_PLATFORMS=platforms, FFI_HANDLERS=handlers,
                   timeout=300, **env).stdout


def test_typed_buffers_of_several_element_types_and_two_results(handlers):
    out = run(handlers, """
    register("AddMul")
    def add_mul(x, y):
        spec = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return jax.ffi.ffi_call("AddMul", (spec, spec))(x, y)
    for dtype in (np.float32, np.int8, np.int32, np.uint8, np.uint32):
        x = (np.arange(12).reshape(3, 4) % 7).astype(dtype)
        y = (np.arange(12).reshape(3, 4)[::-1] % 5 + 1).astype(dtype)
        total, product = jax.jit(add_mul)(jax.device_put(x, pjrt_ref), jax.device_put(y, pjrt_ref))
        assert total.dtype == dtype and total.shape == (3, 4)
        np.testing.assert_array_equal(np.asarray(total), x + y)
        np.testing.assert_array_equal(np.asarray(product), x * y)
    print("OK")
    """)
    assert out.strip().endswith("OK")


def test_64_bit_buffers_and_dimensions(handlers):
    out = run(handlers, """
    jax.config.update("jax_enable_x64", True)
    register("AddMul"); register("ShapeOf")
    x = np.linspace(-1, 1, 6)
    spec = jax.ShapeDtypeStruct(x.shape, x.dtype)
    total, product = jax.jit(lambda a: jax.ffi.ffi_call("AddMul", (spec, spec))(a, a))(
        jax.device_put(x, pjrt_ref))
    np.testing.assert_array_equal(np.asarray(total), x + x)
    i = np.arange(5, dtype=np.int64) * 2**33
    total, _ = jax.ffi.ffi_call("AddMul", (jax.ShapeDtypeStruct((5,), np.int64),) * 2)(i, i)
    np.testing.assert_array_equal(np.asarray(total), i + i)
    dims = jax.jit(lambda a: jax.ffi.ffi_call("ShapeOf", jax.ShapeDtypeStruct((3,), np.int64))(a))(
        jax.device_put(np.zeros((2, 3, 4), np.float32), pjrt_ref))
    print(np.asarray(dims).tolist())
    """)
    assert out.strip().endswith("[2, 3, 4]")


def test_an_aliased_result_is_the_operand_buffer(handlers):
    out = run(handlers, """
    register("DoubleInPlace")
    x = np.arange(5, dtype=np.float32)
    f = jax.jit(lambda a: jax.ffi.ffi_call("DoubleInPlace", jax.ShapeDtypeStruct(a.shape, a.dtype),
                                           input_output_aliases={0: 0})(a))
    print(np.asarray(f(jax.device_put(x, pjrt_ref))).tolist())
    """)
    assert out.strip().endswith("[0.0, 2.0, 4.0, 6.0, 8.0]")


def test_every_attribute_kind_as_numpy_and_cpu_see_it(handlers):
    out = run(handlers, """
    jax.config.update("jax_enable_x64", True)
    register("Attributes"); register("Attributes", platform="cpu")
    def attributes():
        return jax.ffi.ffi_call("Attributes", jax.ShapeDtypeStruct((18,), np.float64))(
            flag=True, i8=np.int8(-3), i16=np.int16(300), i32=np.int32(-70000),
            i64=np.int64(2**40), u8=np.uint8(200), u16=np.uint16(60000),
            u32=np.uint32(4_000_000_000), u64=np.uint64(2**62 + 4), f32=np.float32(1.5),
            f64=np.float64(0.1), name="hello", dims=np.array([2, 3, 4], np.int64),
            weights=np.array([0.5, 0.25, 2.0], np.float32),
            options={"k": np.int32(7), "label": "abcd"})
    expected = np.array([1, -3, 300, -70000, 2**40, 200, 60000, 4_000_000_000, float(2**62 + 4),
                         1.5, 0.1, 5, ord("h"), 9, 2.75, 3, 7, 4], np.float64)
    on_pjrt_ref = np.asarray(jax.jit(attributes, device=pjrt_ref)())
    on_cpu = np.asarray(jax.jit(attributes, device=jax.devices("cpu")[0])())
    np.testing.assert_array_equal(on_pjrt_ref, expected)
    np.testing.assert_array_equal(on_pjrt_ref, on_cpu)
    print("OK")
    """, platforms="pjrt_ref,cpu")
    assert out.strip().endswith("OK")


def test_an_attribute_ffi_cannot_pass_is_named(handlers):
    out = run(handlers, """
    register("AddMul")
    x = jax.device_put(np.ones(3, np.float32), pjrt_ref)
    spec = jax.ShapeDtypeStruct((3,), np.float32)
    try:
        jax.jit(lambda a: jax.ffi.ffi_call("AddMul", (spec, spec))(a, a, half=np.float16(1)))(x)
    except Exception as error:
        print(error)
    """)
    assert "attribute 'half'" in out and "UNIMPLEMENTED" in out


def test_a_layout_other_than_row_major_is_refused(handlers):
    out = run(handlers, """
    register("DoubleInPlace")
    x = jax.device_put(np.ones((2, 3), np.float32), pjrt_ref)
    try:
        jax.jit(lambda a: jax.ffi.ffi_call("DoubleInPlace", jax.ShapeDtypeStruct(a.shape, a.dtype),
                                          input_layouts=[(1, 0)])(a))(x)   # major-to-minor: column-major
    except Exception as error:
        print(error)
    """)
    assert "operand_layouts[0] is [0, 1]" in out and "row-major" in out


def test_the_handlers_error_is_the_users_exception(handlers):
    out = run(handlers, """
    register("Fail")
    x = jax.device_put(np.ones(3, np.float32), pjrt_ref)
    try:
        jax.jit(lambda a: jax.ffi.ffi_call("Fail", jax.ShapeDtypeStruct(a.shape, a.dtype))(a))(x)
    except Exception as error:
        print(type(error).__name__, error)
    """)
    assert "FAILED_PRECONDITION" in out and "Fail: refused 3 elements on purpose" in out


@pytest.mark.parametrize("runtime", ["isolated", "shared"])
def test_an_unregistered_target_says_how_to_register_it(handlers, runtime):
    out = run(handlers, """
    register("on_cpu_only", "AddMul", platform="cpu")
    spec = jax.ShapeDtypeStruct((3,), np.float32)
    x = jax.device_put(np.ones(3, np.float32), pjrt_ref)
    for name in ("no_such_target", "on_cpu_only"):
        try:
            jax.jit(lambda a: jax.ffi.ffi_call(name, (spec, spec))(a, a))(x)
        except Exception as error:
            print(error)
    """, platforms="pjrt_ref,cpu", PJRT_REF_RUNTIME=runtime)
    first, second = out.strip().splitlines()[-2:]
    assert "'no_such_target'" in first and 'register_ffi_target(name, capsule, platform="pjrt_ref")' in first
    # Only the host's jaxlib knows what is registered for cpu; a plugin in a
    # Python of its own has a jaxlib of its own, so it names the likely cause.
    cpu_hint = "registered for cpu" if runtime == "shared" else "default platform, cpu"
    assert "'on_cpu_only'" in second and cpu_hint in second


def test_bad_registrations_are_refused_clearly(handlers):
    out = run(handlers, """
    import ctypes
    data = ctypes.create_string_buffer(64)                 # not a function of any library
    not_code = ctypes.pythonapi.PyCapsule_New
    not_code.restype, not_code.argtypes = ctypes.py_object, (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
    for fn in (42, not_code(ctypes.addressof(data), None, None),
               {"instantiate": jax.ffi.pycapsule(handlers.AddMul)}):
        try:
            jax.ffi.register_ffi_target("bad", fn, platform="pjrt_ref")
        except Exception as error:
            print(type(error).__name__, error)
    """)
    lines = out.strip().splitlines()[-3:]
    assert lines[0].startswith("TypeError") and "expected a PyCapsule" in lines[0]
    assert lines[1].startswith("ValueError") and "not a function of any loaded library" in lines[1]
    assert lines[2].startswith("ValueError") and "execute stage" in lines[2]


def test_an_async_handler_is_waited_for(handlers):
    out = run(handlers, """
    register("AsyncDouble")
    f = jax.jit(lambda a: jax.ffi.ffi_call("AsyncDouble", jax.ShapeDtypeStruct(a.shape, a.dtype))(a))
    print(np.asarray(f(jax.device_put(np.arange(4, dtype=np.float32), pjrt_ref))).tolist())
    try:
        f(jax.device_put(-np.ones(4, np.float32), pjrt_ref)).block_until_ready()
    except Exception as error:
        print(error)
    """)
    values, error = out.strip().splitlines()[-2:]
    assert values == "[0.0, 2.0, 4.0, 6.0]"
    assert "INVALID_ARGUMENT" in error and "AsyncDouble: negative element" in error


def test_context_services(handlers):
    out = run(handlers, """
    register("Context")
    y = jax.jit(lambda: jax.ffi.ffi_call("Context", jax.ShapeDtypeStruct((3,), np.float64))(),
                device=pjrt_ref)()
    print(np.asarray(y).tolist())
    """)
    assert out.strip().endswith("[0.0, 10.0, 1.0]")


def test_legacy_status_returning_custom_call(handlers):
    """api_version 0 handlers are not carried by the PJRT FFI extension (jaxlib's route):
    JAX's registration says so; the interpreter's own table runs them."""
    out = run(handlers, """
    from pjrt_ref.interpreter.ffi import targets
    try:
        register("LegacyAddOne", api_version=0)
    except ValueError as error:
        print(error)
    address = ctypes.cast(handlers.LegacyAddOne, ctypes.c_void_p).value
    targets.register("LegacyAddOne", address, platform="pjrt_ref", api_version=targets.LEGACY)
    call = jax.jit(lambda a: jax.ffi.ffi_call("LegacyAddOne", jax.ShapeDtypeStruct((4,), np.float32),
                                              custom_call_api_version=2)(a))
    print(np.asarray(call(jax.device_put(np.arange(4, dtype=np.float32), pjrt_ref))).tolist())
    try:
        call(jax.device_put(-np.ones(4, np.float32), pjrt_ref))
    except Exception as error:
        print(error)
    """, PJRT_REF_RUNTIME="shared")   # targets.register reaches the plugin's table only in one Python
    refused, values, error = out.strip().splitlines()[-3:]
    assert "typed XLA FFI handlers (api_version=1" in refused
    assert values == "[1.0, 2.0, 3.0, 4.0]"
    assert "LegacyAddOne: negative input" in error


def test_a_legacy_registration_that_cannot_reach_an_isolated_plugin_says_so(handlers):
    out = run(handlers, """
    from pjrt_ref.interpreter.ffi import targets
    address = ctypes.cast(handlers.LegacyAddOne, ctypes.c_void_p).value
    try:
        targets.register("LegacyAddOne", address, platform="pjrt_ref", api_version=targets.LEGACY)
    except Exception as error:
        print(type(error).__name__, error)
    """, PJRT_REF_RUNTIME="isolated")
    last = out.strip().splitlines()[-1]
    assert last.startswith("FailedPrecondition") and "PJRT_REF_RUNTIME=shared" in last, last


def test_registration_for_another_platform_is_refused_by_the_extension():
    from pjrt_ref.errors import InvalidArgument
    from pjrt_ref.interpreter.ffi import targets
    with pytest.raises(InvalidArgument) as caught:
        targets.register("axpb", 1, platform="CUDA", api_version=1)
    assert "'axpb'" in str(caught.value) and 'platform="pjrt_ref"' in str(caught.value)
