"""`xla_dump_to` on pjrt_ref (pjrt_ref/services/dumps.py)."""
from __future__ import annotations

import os

from tests.support.jax_support import run_jax


def _names(directory) -> list[str]:
    return sorted(os.listdir(directory))


def test_a_compile_writes_the_program_and_its_hlo_where_the_user_asked(tmp_path):
    run_jax(f"""
        f = jax.jit(lambda x: jnp.sin(x) * 2, compiler_options={{"xla_dump_to": {str(tmp_path)!r}}})
        f(jnp.arange(4.0))
    """)
    names = _names(tmp_path)
    after = [n for n in names if n.endswith("after_optimizations.txt")]
    assert len(after) == 1 and after[0].startswith("module_") and "jit__lambda" in after[0]
    assert any(n.endswith(".stablehlo.mlir") for n in names)
    assert not any(n.endswith(".hlo.pb") for n in names)
    hlo = (tmp_path / after[0]).read_text()
    assert "HloModule" in hlo and "sine(" in hlo
    mlir = (tmp_path / after[0].replace("after_optimizations.txt", "stablehlo.mlir")).read_text()
    assert "stablehlo.sine" in mlir


def test_protos_and_the_module_filter_are_honoured(tmp_path):
    run_jax(f"""
        options = {{"xla_dump_to": {str(tmp_path)!r}, "xla_dump_hlo_as_proto": True,
                    "xla_dump_hlo_module_re": "keep"}}
        def keep(x):
            return x + 1
        def drop(x):
            return x - 1
        jax.jit(keep, compiler_options=options)(jnp.ones(3))
        jax.jit(drop, compiler_options=options)(jnp.ones(3))
        from jax._src.lib import xla_client
        import glob
        proto = glob.glob({str(tmp_path)!r} + "/*after_optimizations.hlo.pb")[0]
        print(len(open(proto, "rb").read()) > 0)
    """)
    names = _names(tmp_path)
    assert names and all("jit_keep" in n for n in names)
    assert sum(n.endswith("after_optimizations.hlo.pb") for n in names) == 1


def test_a_directory_that_cannot_be_written_fails_the_compile_naming_it(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    proc = run_jax(f"""
        try:
            jax.jit(lambda x: x * 3, compiler_options={{"xla_dump_to": {str(blocker / 'sub')!r}}})(jnp.ones(2))
            print("no error")
        except Exception as error:
            print(str(error).splitlines()[0])
    """)
    line = proc.stdout.strip().splitlines()[-1]
    assert "xla_dump_to=" in line and "a_file" in line and "cannot write the dump" in line
