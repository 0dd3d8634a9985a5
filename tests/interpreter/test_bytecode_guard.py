"""The bytecode guard (interpreter/bytecode_guard.py): untrusted bytecode is
read by a separate checker process (interpreter/bytecode_checker.py) first;
good programs are never turned away, crashers and hangs are rejected, and
the checker comes back after."""
from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import textwrap

from tests.support.repo_paths import DATA

CORPUS = DATA / "fuzz_loader"

_PRELUDE = textwrap.dedent("""
    import io, os, sys, threading
    import numpy as np
    from pjrt_ref.errors import InvalidArgument
    from pjrt_ref.interpreter import load, bytecode_guard
    from pjrt_ref.interpreter.loader import make_context, parse_module

    def bytecode(scale):
        module = parse_module(
            "func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {"
            f" %c = stablehlo.constant dense<{scale}.0> : tensor<3xf32>"
            " %y = stablehlo.multiply %x, %c : tensor<3xf32> return %y : tensor<3xf32> }", make_context())
        buffer = io.BytesIO()
        module.operation.write_bytecode(buffer)
        return buffer.getvalue()

    def outcome(data):
        try:
            return load(data)(np.ones(3, np.float32))[0].tolist()
        except InvalidArgument as error:
            return str(error)

    def count_checks():  # the sizes of the programs sent to a checker from now on
        sent = []
        real_verdict = bytecode_guard.Checker.verdict
        def counting_verdict(self, entry, data, timeout):
            sent.append(len(data))
            return real_verdict(self, entry, data, timeout)
        bytecode_guard.Checker.verdict = counting_verdict
        return sent
""")


def run(code: str, *args: str, **env: str) -> list[str]:
    """Run `code` after _PRELUDE in a fresh process, with an empty cache directory
    unless `env` names one (checkers' survivors are kept there across processes)."""
    with tempfile.TemporaryDirectory() as cache:
        done = subprocess.run([sys.executable, "-c", _PRELUDE + textwrap.dedent(code), *args],
                              capture_output=True, text=True, timeout=300,
                              env={**os.environ, "JAX_PLATFORMS": "cpu", "PJRT_REF_CACHE_DIR": cache, **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def test_crashers_and_hangs_are_rejected_and_good_programs_load_after_them():
    lines = run("""
        print("good", outcome(bytecode(2)))
        print("crash", outcome(open(sys.argv[1], "rb").read()))
        print("good", outcome(bytecode(3)))
        print("hang", outcome(open(sys.argv[2], "rb").read()))
        print("good", outcome(bytecode(4)))
    """, str(CORPUS / "crash-04603b67f1b9.mlirbc"), str(CORPUS / "timeout-87227d48aac7.mlirbc"),
        PJRT_REF_BYTECODE_CHECK_TIMEOUT="5")
    assert lines[0] == "good [2.0, 2.0, 2.0]"
    assert lines[1].startswith("crash MLIR bytecode rejected: it crashes MLIR's bytecode reader (SIGABRT)")
    assert lines[2] == "good [3.0, 3.0, 3.0]"
    assert lines[3] == "hang MLIR bytecode rejected: parsing it did not finish within 5 s (PJRT_REF_BYTECODE_CHECK_TIMEOUT)"
    assert lines[4] == "good [4.0, 4.0, 4.0]"


def test_good_programs_load_while_other_threads_work():
    """The checker is a fresh interpreter, not a fork of this multithreaded
    process: threads busy compiling (holding MLIR's and Python's locks) at the
    moment a check starts cannot make the check fail."""
    lines = run("""
        results = []
        def compile_many(scale):
            for _ in range(15):
                results.append(outcome(bytecode(scale)))
        threads = [threading.Thread(target=compile_many, args=(s,)) for s in range(1, 5)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        print(len(results), sorted(set(map(str, results))))
    """)
    assert lines == ["60 ['[1.0, 1.0, 1.0]', '[2.0, 2.0, 2.0]', '[3.0, 3.0, 3.0]', '[4.0, 4.0, 4.0]']"]


def test_the_caller_plans_from_the_checkers_records_and_never_parses_the_bytes():
    """The checker parses and reads the program and sends back its records
    (interpreter/records.py); the caller plans and optimises from them and
    does not parse the untrusted bytes itself."""
    lines = run("""
        from pjrt_ref.interpreter import records
        x = np.linspace(-3, 3, 1000, dtype=np.float32)
        module = parse_module('''
            func.func @main(%x: tensor<1000xf32>) -> tensor<1000xf32> {
              %c = stablehlo.constant dense<2.0> : tensor<1000xf32>
              %a = stablehlo.multiply %x, %c : tensor<1000xf32>
              %b = stablehlo.add %a, %x : tensor<1000xf32>
              %d = stablehlo.multiply %b, %x : tensor<1000xf32>
              return %d : tensor<1000xf32>
            }''', make_context())
        buffer = io.BytesIO()
        module.operation.write_bytecode(buffer)
        parsed_here = []
        real_parse = records.parse_module
        records.parse_module = lambda source, context: parsed_here.append(source) or real_parse(source, context)
        sent = count_checks()
        loaded = load(buffer.getvalue())
        print("sent", len(sent), "parsed here", len(parsed_here))
        print("fused", "pjrt_ref.fused" in [s.op.name for s in loaded.function.body.steps])
        print("same", bool(np.array_equal(loaded(x)[0], (x * np.float32(2) + x) * x)))
        print("text", "stablehlo.multiply" in loaded.text, len(loaded.mlir_module().body.operations))
    """)
    assert lines == ["sent 1 parsed here 0", "fused True", "same True", "text True 1"]


def test_errors_reading_raises_in_the_checker_come_back_as_themselves():
    """An unsupported op names itself and its location, a program that does
    not parse gets MLIR's words (never a verdict), and an answer holding
    anything but data is refused as INTERNAL."""
    lines = run("""
        import pickle
        from pjrt_ref.errors import Internal, Unimplemented
        module = parse_module('''
            func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
              %y = "test.unknown"(%x) : (tensor<3xf32>) -> tensor<3xf32> loc("f.py":7:3)
              return %y : tensor<3xf32>
            }''', make_context())
        buffer = io.BytesIO()
        module.operation.write_bytecode(buffer)
        try:
            load(buffer.getvalue())
        except Unimplemented as error:
            print("unknown", error)
        print("damaged", outcome(b"ML\\xefR" + bytes(range(40))).replace(chr(10), " | "))
        try:
            bytecode_guard._decoded(pickle.dumps(("record", os.system)))
        except Internal as error:
            print("refused", "system is not part of a checker's answer" in str(error))
    """)
    assert lines[0] == "unknown 'test.unknown' at f.py:7:3: op is not supported by pjrt-ref"
    assert lines[1].startswith("damaged cannot parse program") and "rejected" not in lines[1]
    assert lines[2] == "refused True"


def test_a_forked_process_starts_its_own_checker():
    lines = run("""
        print("parent", outcome(bytecode(2)), flush=True)    # or the child inherits the line unwritten
        pid = os.fork()
        if pid == 0:
            print("child", outcome(bytecode(5)), flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
        print("parent", outcome(bytecode(6)))
    """)
    assert lines == ["parent [2.0, 2.0, 2.0]", "child [5.0, 5.0, 5.0]", "parent [6.0, 6.0, 6.0]"]


def test_a_bad_timeout_setting_is_named():
    lines = run("""
        print(outcome(bytecode(2)))
    """, PJRT_REF_BYTECODE_CHECK_TIMEOUT="soon")
    assert lines == ["PJRT_REF_BYTECODE_CHECK_TIMEOUT='soon' is not a number of seconds greater than 0"]


def test_bytes_the_checker_survived_are_not_checked_again_and_crashers_stay_rejected():
    lines = run("""
        sent = count_checks()
        crasher = open(sys.argv[1], "rb").read()
        print(outcome(bytecode(2)), outcome(bytecode(2)), outcome(bytecode(5)), len(sent))
        print(outcome(crasher)[:26], outcome(crasher)[:26], len(sent))
    """, str(CORPUS / "crash-04603b67f1b9.mlirbc"))
    assert lines[0] == "[2.0, 2.0, 2.0] [2.0, 2.0, 2.0] [5.0, 5.0, 5.0] 2"
    assert lines[1] == "MLIR bytecode rejected: it MLIR bytecode rejected: it 4"


def test_creating_a_client_starts_the_checker_before_the_first_compile():
    """PJRT_Client_Create starts the checker (it imports while JAX traces);
    the first compile then uses that process, and it checks programs as before."""
    lines = run("""
        import jax, jax.numpy as jnp
        jax.devices()                              # PJRT_Client_Create
        started = bytecode_guard._CHECKER
        print("started", started is not None and started.alive)
        y = jax.jit(lambda x: x * 3)(jnp.ones(3, jnp.float32))
        print("same", bytecode_guard._CHECKER is started, np.asarray(y).tolist())
        print("good", outcome(bytecode(2)))
    """, JAX_PLATFORMS="pjrt_ref")
    assert lines == ["started True", "same True [3.0, 3.0, 3.0]", "good [2.0, 2.0, 2.0]"]


def test_with_the_check_off_no_checker_is_started():
    lines = run("""
        import jax
        jax.devices()
        print("checker", bytecode_guard._CHECKER)
    """, JAX_PLATFORMS="pjrt_ref", PJRT_REF_BYTECODE_CHECK="0")
    assert lines == ["checker None"]


def test_a_checker_that_cannot_start_early_does_not_stop_the_client(monkeypatch):
    """start_checker is an early start only: if the process cannot be made
    (no processes left, say), the client is still created and the first
    compile's check starts the checker again."""
    from pjrt_ref.interpreter import bytecode_guard

    def refuse(*args, **kwargs):
        raise OSError("no processes left")

    monkeypatch.setattr(bytecode_guard, "_CHECKER", None)
    monkeypatch.setattr(bytecode_guard.subprocess, "Popen", refuse)
    monkeypatch.setenv("PJRT_REF_BYTECODE_CHECK", "1")
    bytecode_guard.start_checker()
    assert bytecode_guard._CHECKER is None


def test_bytecode_that_parses_but_aborts_the_reader_of_its_ops_is_rejected():
    """This input parses, verifies and prints; walking its ops aborts the
    process (nanobind). The checker reads the ops, so it dies there, not the caller."""
    lines = run("""
        print("crash", outcome(open(sys.argv[1], "rb").read()))
        print("good", outcome(bytecode(2)))
    """, str(CORPUS / "crash-a45551153130.mlirbc"))
    assert lines[0].startswith("crash MLIR bytecode rejected: it crashes MLIR's bytecode reader (SIGABRT)")
    assert lines[1] == "good [2.0, 2.0, 2.0]"


def test_the_checkers_warm_up_program_loads_and_runs():
    """The checker reads WARM_UP_PROGRAM when it starts; a program that
    stopped parsing (a new jaxlib's syntax) would only cost that head start."""
    import numpy as np

    from pjrt_ref.interpreter import load
    from pjrt_ref.interpreter.bytecode_checker import WARM_UP_PROGRAM

    x, w = np.full((4, 8), 0.1, np.float32), np.eye(8, dtype=np.float32)
    expected = np.sum(np.vectorize(math.erf)(np.exp(x.astype(np.float64)) + 1), axis=1)
    np.testing.assert_allclose(load(WARM_UP_PROGRAM)(x, w)[0], expected, rtol=1e-5)


def test_a_checker_that_cannot_start_is_reported_as_such_never_as_a_verdict():
    """A checker that ends before reading the program (here: its module cannot
    be imported, as when a decoy pjrt_ref shadowed the real one) fails the
    compile with FAILED_PRECONDITION and the checker's own stderr; the program
    is not called a crasher, and once the checker can start it runs."""
    lines = run("""
        import jax, jax.numpy as jnp
        from pjrt_ref.errors import FailedPrecondition
        real = bytecode_guard.CHECKER_MODULE
        bytecode_guard._stop_checker()
        bytecode_guard.CHECKER_MODULE = "pjrt_ref.interpreter.no_such_checker"
        try:
            load(bytecode(2))
        except FailedPrecondition as error:
            print("direct", str(error).replace(chr(10), " | "))
        try:
            jax.jit(lambda x: x * 7)(jnp.ones(3, jnp.float32))
        except Exception as error:
            print("jax", str(error).splitlines()[0])
        bytecode_guard.CHECKER_MODULE = real
        print("good", outcome(bytecode(2)))
    """, JAX_PLATFORMS="pjrt_ref")
    assert lines[0].startswith("direct pjrt-ref's bytecode checker process failed, so the program was not "
                               "checked (this says nothing about the program")
    assert "it ended before reading the program (exit status 1)" in lines[0]
    assert "No module named pjrt_ref.interpreter.no_such_checker" in lines[0]
    assert lines[1].startswith("jax FAILED_PRECONDITION: pjrt-ref's bytecode checker process failed")
    assert "rejected" not in lines[0] + lines[1]
    assert lines[2] == "good [2.0, 2.0, 2.0]"


def test_a_checker_that_cannot_be_created_fails_the_check_with_the_cause(monkeypatch):
    import pytest

    from pjrt_ref.errors import FailedPrecondition
    from pjrt_ref.interpreter import bytecode_guard

    def refuse(*args, **kwargs):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(bytecode_guard, "_CHECKER", None)
    monkeypatch.setattr(bytecode_guard.subprocess, "Popen", refuse)
    monkeypatch.setenv("PJRT_REF_BYTECODE_CHECK", "1")
    with pytest.raises(FailedPrecondition, match=r"it could not be started \(\[Errno 24\] Too many open files\)"):
        bytecode_guard.read_checked(b"\x00 any bytes", "main")


def test_answers_that_arrive_together_are_read_one_by_one():
    """The checker's READ and SURVIVED answers can reach the pipe in one piece;
    each is read from the pipe itself, so the second is not left in a buffer
    that select() cannot see (which made checks wait for the timeout)."""
    from types import SimpleNamespace

    from pjrt_ref.interpreter import bytecode_guard

    read_end, write_end = os.pipe()
    checker = object.__new__(bytecode_guard.Checker)
    checker.process = SimpleNamespace(stdout=os.fdopen(read_end, "rb"))
    os.write(write_end, bytecode_guard.READ_ANSWER + bytecode_guard.SURVIVED_ANSWER)
    try:
        assert checker._answer(5) == bytecode_guard.READ_ANSWER
        assert checker._answer(5) == bytecode_guard.SURVIVED_ANSWER
        assert checker._answer(0.01) is None
    finally:
        checker.process.stdout.close()
        os.close(write_end)


def test_survivors_are_remembered_across_processes_and_crashers_never(tmp_path):
    """A program the checker survived in one process is not sent to a checker in
    the next one that shares the cache directory; a crasher is checked again."""
    counting = """
        sent = count_checks()
        print(outcome(bytecode(7)), outcome(open(sys.argv[1], "rb").read())[:26], len(sent))
    """
    crasher = str(CORPUS / "crash-04603b67f1b9.mlirbc")
    first = run(counting, crasher, PJRT_REF_CACHE_DIR=str(tmp_path))
    second = run(counting, crasher, PJRT_REF_CACHE_DIR=str(tmp_path))
    assert first == ["[7.0, 7.0, 7.0] MLIR bytecode rejected: it 2"]
    assert second == ["[7.0, 7.0, 7.0] MLIR bytecode rejected: it 1"]
    assert len(list((tmp_path / "bytecode-checked").iterdir())) == 1


def test_every_attribute_kind_travels_from_the_checker():
    """What the checker reads must pickle: a dot algorithm's element types
    (MLIR types in jaxlib's bindings) come back as their names, and the
    program the caller plans from the checker's records computes what the
    same program read in-process computes."""
    lines = run("""
        text = '''
            func.func @main(%a: tensor<2x3xf32>, %b: tensor<3x2xf32>) -> tensor<2x2xf32> {
              %r = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0],
                  algorithm = <lhs_precision_type = bf16, rhs_precision_type = bf16,
                               accumulation_type = f32, lhs_component_count = 1,
                               rhs_component_count = 1, num_primitive_operations = 1,
                               allow_imprecise_accumulation = false>
                  : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
              return %r : tensor<2x2xf32>
            }'''
        buffer = io.BytesIO()
        parse_module(text, make_context()).operation.write_bytecode(buffer)
        a = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
        b = np.linspace(2, 3, 6, dtype=np.float32).reshape(3, 2)
        checked = load(buffer.getvalue())
        step = checked.function.body.steps[0]
        print("algorithm", step.op.attrs["algorithm"].lhs_precision_type)
        print("same", np.array_equal(checked(a, b)[0], load(text)(a, b)[0]))
    """)
    assert lines == ["algorithm bf16", "same True"]


def test_a_splat_constant_travels_as_one_value_and_arrives_whole():
    """JAX's compile path folds broadcasts of constants into splats of the full
    shape: the checker sends each as its value and shape (a PRNG program's
    twenty 10^7-element splats made a 900 MB answer and a 7 s compile), and
    the caller gets the full, writable array every constant is."""
    lines = run("""
        from pjrt_ref.interpreter import bytecode_checker
        n = 4_000_000
        module = parse_module(f'''
            func.func @main(%x: tensor<{n}xui32>) -> tensor<{n}xui32> {{
              %c = stablehlo.constant dense<2654435769> : tensor<{n}xui32>
              %d = stablehlo.constant dense<[1, 2]> : tensor<2xui32>
              %a = stablehlo.xor %x, %c : tensor<{n}xui32>
              return %a : tensor<{n}xui32>
            }}''', make_context())
        buffer = io.BytesIO()
        module.operation.write_bytecode(buffer)
        answer_size = len(bytecode_checker.answer(buffer.getvalue()))
        loaded = load(buffer.getvalue())      # through the checker process
        x = np.arange(n, dtype=np.uint32)
        print("small", answer_size < 100_000)
        print("same", bool(np.array_equal(loaded(x)[0], x ^ np.uint32(2654435769))))
    """)
    assert lines == ["small True", "same True"]
