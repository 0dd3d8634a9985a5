"""The debug switches under JAX (plugin in a child process) and from the CLI:
PJRT_REF_CHECK_NANS raises a Python exception naming the user's line,
`pjrt-ref trace` logs each op, `pjrt-ref explain` summarises the PJRT calls,
PJRT_REF_PROFILE writes a Chrome trace that `pjrt-ref profile` reads."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.support.jax_support import clean_env

SCRIPT = """\
import jax, jax.numpy as jnp

def f(y):
    return jnp.log(y - 2.0) * 3.0

try:
    print(jax.jit(f)(1.5))
except Exception as error:
    print("raised", type(error).__name__)
    print(error)
"""


def write_script(tmp_path, text=SCRIPT):
    path = tmp_path / "user_code.py"
    path.write_text(textwrap.dedent(text))
    return path


def run(args, timeout=120, **env):
    proc = subprocess.run([sys.executable, *args], env=clean_env(**env), capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return proc


def test_check_nans_under_jax_names_log_and_the_users_line(tmp_path):
    script = write_script(tmp_path)
    proc = run([str(script)], JAX_PLATFORMS="pjrt_ref", PJRT_REF_CHECK_NANS="1")
    assert "raised" in proc.stdout, proc.stdout
    assert "'stablehlo.log'" in proc.stdout
    assert f"{script}:4:" in proc.stdout
    assert "operand 0: f32[] min=-0.5 max=-0.5" in proc.stdout
    # Without the switch the NaN comes back as a value.
    assert run([str(script)], JAX_PLATFORMS="pjrt_ref").stdout.strip() == "nan"


def test_cli_trace_logs_each_op(tmp_path):
    program = tmp_path / "f.mlir"
    run(["-c", f"""
import jax, jax.numpy as jnp
def f(y):
    return jnp.log(y - 2.0) * 3.0
open({str(program)!r}, "w").write(jax.jit(f).lower(1.5).as_text(debug_info=True))
"""], JAX_PLATFORMS="cpu")
    proc = run(["-m", "pjrt_ref.cli.main", "trace", str(program), "--arg", "2.5"])
    ops = [line.split()[2] for line in proc.stderr.splitlines() if line.startswith("pjrt-ref trace:")]
    assert ops == ["stablehlo.constant", "stablehlo.subtract", "stablehlo.log",
                   "stablehlo.constant", "stablehlo.multiply"], proc.stderr
    assert "f32[] min=-0.693147 max=-0.693147" in proc.stderr
    assert "-2.07944" in proc.stdout
    jsonl = tmp_path / "t.jsonl"
    run(["-m", "pjrt_ref.cli.main", "trace", str(program), "--arg", "2.5", "--jsonl", str(jsonl)])
    assert [json.loads(l)["op"] for l in jsonl.read_text().splitlines()] == ops


def test_explain_summarises_the_conversation(tmp_path):
    script = write_script(tmp_path, """\
        import jax, jax.numpy as jnp

        def f(x, y):
            return jnp.sin(x) * y

        print(jax.jit(f)(jnp.arange(4.0), 2.0))
    """)
    proc = run(["-m", "pjrt_ref.cli.main", "explain", str(script)])
    out = proc.stdout
    assert "script output:" in out and "calls per entry point:" in out
    assert "programs compiled, in order: jit_iota, jit_f" in out
    conversation = out.split("the conversation for jit_f")[1]
    position = 0
    for name in ("PJRT_Client_Compile", "PJRT_Client_BufferFromHostBuffer",
                 "PJRT_LoadedExecutable_Execute", "PJRT_Event_OnReady", "PJRT_Buffer_IsOnCpu",
                 "PJRT_Buffer_IncreaseExternalReferenceCount", "PJRT_Buffer_OpaqueDeviceMemoryDataPointer",
                 "PJRT_Buffer_DecreaseExternalReferenceCount", "PJRT_Buffer_Destroy"):
        position = conversation.index(name, position)   # in this order
    assert "PJRT_Buffer_ToHostBuffer" not in conversation   # print(y) views the result in place
    assert "type=F32 dims=[]" in conversation
    assert "args=[0x" in conversation and "float32[4]" in conversation


def test_profile_under_jax_and_report(tmp_path):
    script = write_script(tmp_path, """\
        import jax, jax.numpy as jnp

        def f(x):
            def body(i, c):
                return jnp.cos(c) + 1.0
            return jax.lax.fori_loop(0, 5, body, x) * 2.0

        print(jax.jit(f)(jnp.ones(8)))
    """)
    trace = tmp_path / "profile.json"
    run([str(script)], JAX_PLATFORMS="pjrt_ref", PJRT_REF_PROFILE=str(trace))
    events = json.loads(trace.read_text())["traceEvents"]
    categories = {e["cat"] for e in events}
    assert {"compile", "execute", "op"} <= categories
    cosines = [e for e in events if e["name"] == "cosine"]
    assert len(cosines) == 5
    assert cosines[0]["args"]["location"].startswith(f"{script}:5:")
    assert cosines[0]["args"]["operands"] == ["f32[8]"] and cosines[0]["args"]["results"] == ["f32[8]"]
    executes = [e for e in events if e["cat"] == "execute"]
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in executes)
    report = run(["-m", "pjrt_ref.cli.main", "profile", str(trace)]).stdout
    assert "top ops by self time:" in report and "stablehlo.cosine" in report
    assert f"{script}:5" in report
