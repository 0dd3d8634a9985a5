"""Sorting failures by cause (pjrt_ref/testkit/causes.py), on the messages real backends give."""
from __future__ import annotations

from pjrt_ref.testkit.causes import Cause, Finding, by_kind, cause_of, triage
from pjrt_ref.testkit.replay import Replay

DIFFERS = {"op": "stablehlo.reverse", "location": "tests/lax_test.py:2210:11", "dtype": "float32",
           "differing": 1, "elements": 6, "max_ulp": 1065353216,
           "worst": [{"index": [0, 0], "pjrt_ref": "2.0", "other": "1.0", "ulp": 1065353216}]}


def test_a_replay_that_names_an_op_files_the_test_under_that_op_and_type():
    replays = [Replay(1, "agrees"), Replay(2, "differs", "...", DIFFERS, "plugin")]
    cause, evidence = cause_of("AssertionError: Arrays are not almost equal", "", replays)
    assert cause == Cause("op differs", "stablehlo.reverse (float32)")
    assert "tests/lax_test.py:2210:11" in evidence and "1065353216 ULP" in evidence
    assert "apart from the others: plugin" in evidence


def test_where_pjrt_ref_stands_apart_the_report_quotes_its_reading_of_the_spec():
    facts = {**DIFFERS, "spec": 'Spec "reverse" (docs/spec.md#reverse): flip each of `dimensions`'}
    _, evidence = cause_of("AssertionError", "", [Replay(1, "differs", "...", facts, "pjrt-ref")])
    assert "apart from the others: pjrt-ref" in evidence and "docs/spec.md#reverse" in evidence
    _, evidence = cause_of("AssertionError", "", [Replay(1, "differs", "...", facts, "plugin")])
    assert "docs/spec.md" not in evidence


def test_results_that_differ_with_no_single_op_to_blame_say_so():
    cause, _ = cause_of("AssertionError", "", [Replay(1, "differs", "no op differs beyond tolerance")])
    assert cause == Cause("results differ", "no single op")


def test_error_texts_name_the_custom_call_target_or_op_the_plugin_rejects():
    texts = {
        "jax.errors.JaxRuntimeError: UNIMPLEMENTED: custom call target 'lapack_sgetrf_ffi' is not "
        "registered in pjrt-ref: a handler for pjrt_ref is registered with ...":
            Cause("unsupported custom call", "lapack_sgetrf_ffi"),
        'XlaRuntimeError: NOT_FOUND: No registered implementation for FFI custom call to '
        'cu_lu_pivots_to_permutation for Host': Cause("unsupported custom call", "cu_lu_pivots_to_permutation"),
        "jax.errors.JaxRuntimeError: NOT_FOUND: No FFI handler registered for lapack_sgees_ffi on a "
        "platform Host (canonical host)": Cause("unsupported custom call", "lapack_sgees_ffi"),
        "UNIMPLEMENTED: 'stablehlo.fft' at x.py:3: op is not supported by pjrt-ref":
            Cause("op rejected", "stablehlo.fft"),
        "INTERNAL: failed to legalize operation 'stablehlo.custom_call'":
            Cause("op rejected", "stablehlo.custom_call"),
        "RuntimeError: Unknown backend cpu. Available backends are ['xla_cpu_plugin']":
            Cause("test asks for JAX's own cpu backend", "cpu"),
        # XLA's own CPU plugin (lammps-jax-pjrt-cpu 0.11.2) on debugging_primitives_test:
        'jax.errors.JaxRuntimeError: UNIMPLEMENTED: Side-effect ops cannot be replicated: '
        '%inspect_sharding.0 = s32[2,2,2]{2,1,0} custom-call(%x.0), custom_call_target="InspectSharding", '
        'custom_call_has_side_effect=true': Cause("custom call rejected", "InspectSharding"),
        'jax.errors.JaxRuntimeError: INTERNAL: RET_CHECK failure (xla/service/spmd/spmd_partitioner.cc:7426) '
        'hlo->has_sharding() Side-effect HLO must have sharding: %debug_print.0 = () custom-call(%squeeze.0), '
        'custom_call_target="xla_ffi_partitioned_python_cpu_callback"':
            Cause("custom call rejected", "xla_ffi_partitioned_python_cpu_callback"),
    }
    for text, expected in texts.items():
        assert cause_of(text.splitlines()[0], text, [])[0] == expected, text


def test_hangs_and_crashes_come_before_anything_else():
    assert cause_of("hung: nothing finished for 600 s", "", [])[0] == Cause("hang")
    crash = "worker 'gw1' crashed while running 'tests/lax_test.py::LaxTest::testRev'"
    assert cause_of(crash, crash, [Replay(1, "differs", "", DIFFERS)])[0] == Cause("crash")


def test_other_errors_are_grouped_by_their_class_and_status():
    cause, _ = cause_of("jax.errors.JaxRuntimeError: INTERNAL: something broke", "", [])
    assert cause == Cause("other error", "JaxRuntimeError: INTERNAL")
    assert cause_of("AssertionError: not equal", "", [])[0] == Cause("other error", "AssertionError")


def test_the_cause_that_explains_the_most_tests_comes_first():
    findings = [Finding("a", Cause("crash")), Finding("b", Cause("op differs", "x")),
                Finding("c", Cause("op differs", "x")), Finding("d", Cause("hang"))]
    rows = triage(findings)
    assert [(row.cause.title(), [f.test for f in row.findings]) for row in rows] == [
        ("op differs: x", ["b", "c"]), ("crash", ["a"]), ("hang", ["d"])]


def test_causes_of_one_kind_gather_in_the_short_view():
    findings = [Finding(t, Cause("unsupported custom call", target)) for t, target in
                (("a", "lapack_sgetrf_ffi"), ("b", "lapack_sgetrf_ffi"), ("c", "lapack_cgees_ffi"))]
    findings.append(Finding("d", Cause("op differs", "stablehlo.reverse (float32)")))
    kinds = by_kind(triage(findings))
    assert [(k.kind, k.tests, k.causes, k.largest.cause.subject) for k in kinds] == [
        ("unsupported custom call", 3, 2, "lapack_sgetrf_ffi"), ("op differs", 1, 1, "stablehlo.reverse (float32)")]
