"""PJRT_REF_CHECK_NANS, PJRT_REF_TRACE and PJRT_REF_PROFILE on the interpreter (in process).

The switches are read when a program is loaded, so each test sets them
(monkeypatch) before `load`; programs come from JAX's lowering with debug
info, so locations name this file.
"""
from __future__ import annotations

import json
import logging
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pjrt_ref.debug import profile
from pjrt_ref.interpreter import instrument, load
from pjrt_ref.interpreter.instrument import NonFiniteResult, summarize
from pjrt_ref.errors import ErrorCode, FailedPrecondition


def lowered(fn, *args) -> str:
    return jax.jit(fn).lower(*args).as_text(debug_info=True)


def nan_in_loop(x):
    def body(i, c):
        c = c - 1.0
        return jnp.sqrt(c)  # line of interest: sqrt of a negative on iteration 2
    return jax.lax.fori_loop(0, 3, body, x)


def test_switches_off_leave_the_plan_alone(monkeypatch):
    for name in ("PJRT_REF_CHECK_NANS", "PJRT_REF_TRACE", "PJRT_REF_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    program = load(lowered(lambda x: jnp.log(x) * 2.0, np.float32(-1.0)))
    assert program.module_plan.instrument is None
    assert np.isnan(program(np.float32(-1.0))[0])


def _function_holding(text: str, op: str) -> str:
    """The name of the func.func in `text` whose body has the first `op`."""
    before = text[:text.index(op)]
    return re.findall(r"func\.func (?:public |private )?@([\w\"<>]+)", before)[-1]


def test_check_nans_names_op_location_and_operands(monkeypatch):
    """The error names the op, the user's line and the operands, and the
    function it is in when that is not @main (JAX 0.10 puts a loop body in
    @closed_call, JAX 0.12 inlines it)."""
    monkeypatch.setenv("PJRT_REF_CHECK_NANS", "1")
    text = lowered(nan_in_loop, np.float32(1.5))
    program = load(text)
    with pytest.raises(NonFiniteResult) as info:
        program(np.float32(1.5))
    error = info.value
    assert error.code == ErrorCode.INVALID_ARGUMENT
    assert error.op == "stablehlo.sqrt"
    line = nan_in_loop.__code__.co_firstlineno + 3
    assert f"test_debug_instrument.py:{line}:" in error.location
    message = str(error)
    function = _function_holding(text, "stablehlo.sqrt")
    where = "" if function == "main" else f" (in @{function})"
    assert f"result holds NaN that its operands did not{where} (PJRT_REF_CHECK_NANS)" in message
    # sqrt(0.5) - 1 on the second iteration
    assert "operand 0: f32[] min=-0.292893 max=-0.292893 mean=-0.292893 nan=0 inf=0" in message


def test_check_nans_flags_new_inf_but_not_constants_or_propagation(monkeypatch):
    monkeypatch.setenv("PJRT_REF_CHECK_NANS", "1")
    # A max reduction starts from a -inf constant; NaN inputs just propagate.
    quiet = load(lowered(lambda x: jnp.max(x) + x, np.zeros(3, np.float32)))
    quiet(np.array([1.0, np.nan, 2.0], np.float32))
    noisy = load(lowered(lambda x, y: x / y, np.float32(1), np.float32(0)))
    with pytest.raises(NonFiniteResult, match="stablehlo.divide.*Inf that its operands did not"):
        noisy(np.float32(1), np.float32(0))


def test_trace_jsonl_records_every_op_including_loop_bodies(monkeypatch, tmp_path):
    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv("PJRT_REF_TRACE", str(path))
    program = load(lowered(nan_in_loop, np.float32(1.5)))
    program(np.float32(1.5))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    sqrts = [r for r in records if r["op"] == "stablehlo.sqrt"]
    assert len(sqrts) == 3                     # once per iteration
    assert sqrts[0]["results"][0] == {"type": "f32[]", "nan": 0, "inf": 0,
                                      "min": float(np.sqrt(np.float32(0.5))), "max": float(np.sqrt(np.float32(0.5))),
                                      "mean": float(np.sqrt(np.float32(0.5)))}
    assert sqrts[1]["results"][0]["nan"] == 1
    assert "test_debug_instrument.py" in sqrts[0]["location"]
    assert records[-1]["op"] == "stablehlo.while"


def test_trace_logs_to_the_trace_logger(monkeypatch, caplog):
    monkeypatch.setenv("PJRT_REF_TRACE", "1")
    program = load(lowered(lambda x: jnp.sin(x) * 2.0, np.zeros(4, np.float32)))
    with caplog.at_level(logging.INFO, logger="pjrt_ref.trace"):
        program(np.arange(4, dtype=np.float32))
    lines = [r.getMessage() for r in caplog.records if r.name == "pjrt_ref.trace"]
    assert any(l.startswith("stablehlo.sine") and "f32[4] min=0 max=0.909297" in l for l in lines), lines


def test_profile_records_every_op_through_the_debug_packages_recorder(monkeypatch, tmp_path):
    """The interpreter does not import pjrt_ref.debug; importing it (above)
    plugged its recorder in."""
    path = str(tmp_path / "profile.json")
    monkeypatch.setenv("PJRT_REF_PROFILE", path)
    program = load(lowered(nan_in_loop, np.float32(1.5)))
    program(np.float32(1.5))
    profile.recorder(path).flush()
    with open(path) as f:
        ops = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "op"]
    assert [e["name"] for e in ops].count("sqrt") == 3          # once per iteration
    assert "test_debug_instrument.py" in next(e for e in ops if e["name"] == "sqrt")["args"]["location"]


@pytest.mark.parametrize("setting, maker", [("PJRT_REF_PROFILE", "_MAKE_RECORDER"), ("PJRT_REF_DIFF", "_MAKE_DIFFER")])
def test_a_switch_whose_sink_is_not_plugged_in_says_what_to_import(monkeypatch, tmp_path, setting, maker):
    monkeypatch.setattr(instrument, maker, None)          # as if pjrt_ref.debug had not been imported
    monkeypatch.setenv(setting, str(tmp_path / "out"))
    with pytest.raises(FailedPrecondition, match=f"{setting}=.* import pjrt_ref.debug before loading programs"):
        load(lowered(jnp.sin, np.float32(1)))


def test_summaries_of_narrow_and_complex_types():
    import ml_dtypes

    assert summarize(np.array([1, -2], ml_dtypes.bfloat16)) == {
        "type": "bf16[2]", "nan": 0, "inf": 0, "min": -2.0, "max": 1.0, "mean": -0.5}
    assert summarize(np.array([3 + 4j, np.nan], np.complex64))["max"] == 5.0
    assert "nan" not in summarize(np.array([1, 2], np.int32))
