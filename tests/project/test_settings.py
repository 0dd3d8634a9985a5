"""pjrt_ref/settings.py: every PJRT_REF_* variable declared once, parsed one
way per type, read only through the registry, listed in the README, and
marked in or out of the compile key that the program cache and JAX's
persistent cache use. Product code, benchmarks/ and the tests themselves
name no variable the registry does not declare."""
from __future__ import annotations

import ast
import os
import pathlib
import re

import pytest

from pjrt_ref import settings
from pjrt_ref.errors import InvalidArgument
from pjrt_ref.settings import SETTINGS, Flag, Integer, InvalidSetting, LogOrFile, Number, OneOf, Setting, Text
from tests.support.repo_paths import REPO

# Product code whose environment reads must go through the registry. The
# shim's Python (capi_shim/) writes C macros named PJRT_REF_*, which are no
# environment variables: it is scanned for reads, not for names.
NAME_SCANNED = ("pjrt_ref", "interpreter", "conformance")
READ_SCANNED = NAME_SCANNED + ("capi_shim",)
# The benchmarks and the tests: every variable they read, or set for a child
# process, must be declared too (a misspelt one would be silently ignored).
# This file is left out: it makes up names to test the registry with.
HARNESS_SCANNED = ("benchmarks", "tests")
NAME = re.compile(r"PJRT_REF_[A-Z][A-Z0-9_]*")
TABLE = re.compile(r"<!-- settings-table:start -->\n(.*?)<!-- settings-table:end -->", re.S)


def python_files(folders) -> list[pathlib.Path]:
    return sorted(path for folder in folders for path in (REPO / folder).rglob("*.py"))


# ------------------------------------------------------------------ README
def test_the_readme_table_is_the_generated_one():
    tables = TABLE.findall((REPO / "README.md").read_text(encoding="utf-8"))
    assert len(tables) == 1, "README.md needs one settings-table:start/end pair"
    assert tables[0] == settings.markdown_table(), (
        "README.md's table of switches is out of date: paste `python -m pjrt_ref.settings --markdown` "
        "between its settings-table markers")


def test_the_table_has_a_row_per_setting_with_its_type_and_default(monkeypatch):
    rows = settings.markdown_table().splitlines()[2:]
    assert [row.split(" | ")[0] for row in rows] == [f"| `{name}`" for name in SETTINGS]
    assert "| `PJRT_REF_MAX_BYTES` | int ≥ 0 | available memory | yes |" in settings.markdown_table()
    assert "| `PJRT_REF_STRICT` | bool | 0 | yes |" in settings.markdown_table()
    assert "| `PJRT_REF_SLOW_TESTS` | bool | 0 | no |" in settings.markdown_table()
    monkeypatch.setitem(SETTINGS, "PJRT_REF_PIPE", Setting("PJRT_REF_PIPE", Text("a|b", "a or b"), None, "x|y"))
    assert settings.markdown_table().splitlines()[-1] == "| `PJRT_REF_PIPE` | a\\|b | unset | yes | x\\|y |"


# ------------------------------------------------------------------ product code
def environment_reads(source: str) -> list[str]:
    """The PJRT_REF_* names `source` reads from the environment directly:
    os.environ.get / [...] (not assigned or deleted) / `in`, os.getenv, with a literal name or a
    module-level constant holding one (an `environ = os.environ` alias too)."""
    tree = ast.parse(source)
    constants = {target.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                 for target in node.targets if isinstance(target, ast.Name)}

    def is_environ(node) -> bool:
        return ((isinstance(node, ast.Attribute) and node.attr == "environ")
                or (isinstance(node, ast.Name) and node.id == "environ"))

    def name_of(node) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        return constants.get(node.id) if isinstance(node, ast.Name) else None

    keys = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute):
            if (node.func.attr in ("get", "pop", "setdefault") and is_environ(node.func.value)) \
                    or node.func.attr == "getenv":
                keys.append(node.args[0])
        elif isinstance(node, ast.Subscript) and is_environ(node.value) and isinstance(node.ctx, ast.Load):
            keys.append(node.slice)
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) \
                and any(is_environ(c) for c in node.comparators):
            keys.append(node.left)
    return [name for name in map(name_of, keys) if name and NAME.fullmatch(name)]


def test_the_scan_finds_each_way_of_reading_the_environment():
    source = '''
import os
VARIABLE = "PJRT_REF_A"
environ = os.environ
a = os.environ.get(VARIABLE, "")
b = environ.get("PJRT_REF_B")
c = "PJRT_REF_C" in os.environ
d = os.getenv("PJRT_REF_D")
e = os.environ["PJRT_REF_E"]
f = os.environ.get("HOME")
child = dict(os.environ, PJRT_REF_G="1")
os.environ["PJRT_REF_H"] = "1"       # setting a variable (for children, or a C library) is no read
del os.environ["PJRT_REF_H"]
'''
    assert environment_reads(source) == ["PJRT_REF_A", "PJRT_REF_B", "PJRT_REF_C", "PJRT_REF_D", "PJRT_REF_E"]


def test_product_code_reads_pjrt_ref_variables_only_through_the_registry():
    direct = {f"{path.relative_to(REPO)}: {name}"
              for path in python_files(READ_SCANNED) if path.name != "settings.py"
              for name in environment_reads(path.read_text(encoding="utf-8"))}
    assert not direct, f"read with settings.get instead: {sorted(direct)}"


def test_every_pjrt_ref_name_in_product_code_is_declared():
    undeclared = {f"{path.relative_to(REPO)}: {name}"
                  for path in python_files(NAME_SCANNED)
                  for name in NAME.findall(path.read_text(encoding="utf-8")) if name not in SETTINGS}
    assert not undeclared, f"declare these in pjrt_ref/settings.py: {sorted(undeclared)}"


# ------------------------------------------------------------------ benchmarks and tests
def variables_named(source: str) -> list[str]:
    """The PJRT_REF_* variables `source` names as such: string constants that
    are a whole name (os.environ reads and writes, settings.get, env dicts
    for children) and keyword arguments (`run_python(..., PJRT_REF_X="1")`)."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.append(node.value)
        elif isinstance(node, ast.keyword) and node.arg:
            names.append(node.arg)
    return [name for name in names if NAME.fullmatch(name)]


def test_the_harness_scan_finds_reads_settings_and_names_for_children():
    source = '''
import os
SLOW = os.environ.get("PJRT_REF_A") == "1"
os.environ.setdefault("PJRT_REF_B", "0")
run_python("print(1)", PJRT_REF_C="1")
env = {**os.environ, "PJRT_REF_D": "1"}
PJRT_REF_AND_CPU = {"JAX_PLATFORMS": "pjrt_ref,cpu"}      # a Python name, no variable
pattern = r"#define PJRT_REF_MACRO ([0-9.]+)"                # C text, no variable
'''
    assert sorted(variables_named(source)) == ["PJRT_REF_A", "PJRT_REF_B", "PJRT_REF_C", "PJRT_REF_D"]


def harness_files() -> list[pathlib.Path]:
    this_file = pathlib.Path(__file__).resolve()
    return [path for path in python_files(HARNESS_SCANNED)
            if path.resolve() != this_file and "data" not in path.relative_to(REPO).parts]


def test_every_pjrt_ref_variable_in_benchmarks_and_tests_is_declared():
    assert len(harness_files()) > 100
    undeclared = {f"{path.relative_to(REPO)}: {name}" for path in harness_files()
                  for name in variables_named(path.read_text(encoding="utf-8")) if name not in SETTINGS}
    assert not undeclared, f"declare these in pjrt_ref/settings.py: {sorted(undeclared)}"


def test_the_tests_own_switches_are_declared_out_of_the_compile_key():
    """The test harness's switches change which tests run, never what a
    compile makes: a slow run must not miss JAX's persistent cache."""
    for name in ("PJRT_REF_SLOW_TESTS", "PJRT_REF_SUITE_PROGRESS", "PJRT_REF_RECORD_TEST"):
        assert not settings.declared(name).in_compile_key, name


def test_settings_imports_nothing_from_pjrt_ref_but_errors():
    """The interpreter, a lower layer, reads settings: the registry must not import upward."""
    tree = ast.parse((REPO / "pjrt_ref" / "settings.py").read_text(encoding="utf-8"))
    ours = [(node.level, node.module) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            and (node.level or (node.module or "").startswith("pjrt_ref"))]
    imported = [node.names[0].name for node in ast.walk(tree) if isinstance(node, ast.Import)]
    assert ours == [(0, "pjrt_ref.errors")]
    assert not [name for name in imported if name.startswith("pjrt_ref")]


# ------------------------------------------------------------------ parsers
# Per type: (text, value) pairs it accepts, and texts it rejects.
def accepted_texts(setting) -> list[tuple[str, object]]:
    kind = setting.kind
    if isinstance(kind, Flag):
        return [("1", True), ("0", False), ("true", True), ("False", False), ("yes", True),
                ("NO", False), ("on", True), ("off", False), (" 1 ", True)]
    if isinstance(kind, Integer):
        top = kind.maximum if kind.maximum is not None else kind.minimum + 1000
        return [(str(kind.minimum), kind.minimum), (f"+{top}", top), (f" {top} ", top)]
    if isinstance(kind, Number):
        return [("0.25", 0.25), ("3", 3.0), ("1e3", 1000.0)] + ([] if kind.positive else [("0", 0.0)])
    if isinstance(kind, LogOrFile):
        return [("0", None), ("1", LogOrFile.LOG), ("stderr", LogOrFile.LOG), ("log", LogOrFile.LOG),
                ("/tmp/trace.jsonl", "/tmp/trace.jsonl")]
    if isinstance(kind, OneOf):
        return [(word, word) for word in kind.words] + [(f" {kind.words[0]} ", kind.words[0])]
    assert isinstance(kind, Text), f"{setting.name}: a type this test does not know"
    return [("cpu", "cpu"), ("/some/where", "/some/where")]


def rejected_texts(setting) -> list[str]:
    kind = setting.kind
    if isinstance(kind, Flag):
        return ["2", "maybe", "-1", "enabled"]
    if isinstance(kind, Integer):
        bad = ["many", "1.5", "0x10", "1_000", str(kind.minimum - 1)]
        return bad + ([str(kind.maximum + 1)] if kind.maximum is not None else [])
    if isinstance(kind, Number):
        return ["soon", "nan", "inf", "-1"] + (["0"] if kind.positive else [])
    if isinstance(kind, OneOf):
        return ["other", kind.words[0].upper()]
    return []   # text and paths: every non-empty text is one


def typed_settings(kinds) -> list:
    return [pytest.param(setting, id=setting.name) for setting in SETTINGS.values()
            if isinstance(setting.kind, kinds)]


@pytest.mark.parametrize("setting", [pytest.param(s, id=s.name) for s in SETTINGS.values()])
def test_each_setting_accepts_its_documented_values(setting, monkeypatch):
    for text, value in accepted_texts(setting):
        monkeypatch.setenv(setting.name, text)
        assert settings.get(setting.name) == value, text
    for unset in ("", "   "):
        monkeypatch.setenv(setting.name, unset)
        assert settings.get(setting.name) == setting.default
    monkeypatch.delenv(setting.name)
    assert settings.get(setting.name) == setting.default


@pytest.mark.parametrize("setting", typed_settings((Flag, Integer, Number, OneOf)))
def test_each_setting_rejects_a_bad_value_naming_the_variable_the_value_and_what_it_accepts(setting, monkeypatch):
    for text in rejected_texts(setting):
        monkeypatch.setenv(setting.name, text)
        with pytest.raises(InvalidSetting) as error:
            settings.get(setting.name)
        assert str(error.value) == f"{setting.name}={text!r} is not {setting.kind.accepted}"
        assert isinstance(error.value, InvalidArgument)     # INVALID_ARGUMENT at the C API


@pytest.mark.parametrize("setting", typed_settings((Flag, Integer, Number)))
def test_each_declared_default_is_a_value_its_type_accepts(setting):
    if setting.default is not None:
        assert setting.parse(setting.shown_default()) == setting.default


def test_a_value_is_read_again_at_each_get(monkeypatch):
    monkeypatch.setenv("PJRT_REF_MAX_STEPS", "10")
    assert settings.get("PJRT_REF_MAX_STEPS") == 10
    monkeypatch.setenv("PJRT_REF_MAX_STEPS", "20")
    assert settings.get("PJRT_REF_MAX_STEPS") == 20


def test_an_undeclared_name_is_a_key_error():
    with pytest.raises(KeyError, match="PJRT_REF_NOPE is not declared"):
        settings.get("PJRT_REF_NOPE")


# ------------------------------------------------------------------ overrides
def test_an_override_wins_over_the_environment_until_its_block_ends(monkeypatch):
    monkeypatch.setenv("PJRT_REF_TRACE", "0")
    monkeypatch.delenv("PJRT_REF_DIFF_RTOL", raising=False)
    with settings.override(PJRT_REF_TRACE="out.jsonl", PJRT_REF_DIFF_RTOL="0.5"):
        assert settings.get("PJRT_REF_TRACE") == "out.jsonl"
        assert settings.get("PJRT_REF_DIFF_RTOL") == 0.5
        with settings.override(PJRT_REF_TRACE=""):                # "" overrides to unset
            assert settings.get("PJRT_REF_TRACE") is None
        assert settings.get("PJRT_REF_TRACE") == "out.jsonl"
        assert os.environ["PJRT_REF_TRACE"] == "0" and "PJRT_REF_DIFF_RTOL" not in os.environ
    assert settings.get("PJRT_REF_TRACE") is None
    assert settings.get("PJRT_REF_DIFF_RTOL") is None


def test_a_bad_override_fails_when_given():
    with pytest.raises(InvalidSetting, match=r"PJRT_REF_DIFF_TIMEOUT='-1.0' is not a number of seconds"):
        with settings.override(PJRT_REF_DIFF_TIMEOUT="-1.0"):
            pass
    assert settings.get("PJRT_REF_DIFF_TIMEOUT") == settings.default("PJRT_REF_DIFF_TIMEOUT")


# ------------------------------------------------------------------ call sites
def _max_steps():
    from pjrt_ref.limits import max_steps
    return max_steps()


def _max_bytes():
    from pjrt_ref.limits import max_bytes
    return max_bytes()


def _device_count():
    from pjrt_ref.model.client import device_count
    return device_count()


def _collective_timeout():
    from pjrt_ref.interpreter.process_grid import collective_timeout
    return collective_timeout()


def _jit_threads():
    from pjrt_ref.interpreter.native.threads import threads
    return threads()


def _matmul_threads():
    from pjrt_ref.interpreter.native.blas import matmul_threads
    return matmul_threads()


def _compile_min_elements():
    from pjrt_ref.interpreter.optimiser.fusion import compile_min_elements
    return compile_min_elements()


def _optimize_enabled():
    from pjrt_ref.interpreter.optimiser import optimize_enabled
    return optimize_enabled()


# Values these readers used to take in silence (a default, 1, "on") or turn
# into INTERNAL (a ValueError from int()); now INVALID_ARGUMENT naming them.
@pytest.mark.parametrize("reader, name, bad", [
    (_max_steps, "PJRT_REF_MAX_STEPS", "lots"),
    (_max_bytes, "PJRT_REF_MAX_BYTES", "1GB"),
    (_device_count, "PJRT_REF_NUM_DEVICES", "0"),
    (_collective_timeout, "PJRT_REF_COLLECTIVE_TIMEOUT", "never"),
    (_jit_threads, "PJRT_REF_JIT_THREADS", "all"),
    (_matmul_threads, "PJRT_REF_MATMUL_THREADS", "-2"),
    (_compile_min_elements, "PJRT_REF_JIT_MIN_ELEMENTS", "big"),
    (_optimize_enabled, "PJRT_REF_OPTIMIZE", "2"),
])
def test_readers_reject_a_bad_value_naming_the_variable(reader, name, bad, monkeypatch):
    monkeypatch.setenv(name, bad)
    with pytest.raises(InvalidArgument, match=f"^{name}='{re.escape(bad)}' is not "):
        reader()


def test_readers_keep_their_meanings_of_zero_and_unset(monkeypatch):
    for name in ("PJRT_REF_MAX_STEPS", "PJRT_REF_JIT_THREADS"):
        monkeypatch.setenv(name, "0")
    monkeypatch.setenv("PJRT_REF_MAX_BYTES", "0")
    assert _max_steps() is None and _max_bytes() is None      # 0: no limit
    assert _jit_threads() == 1                                 # 0 threads count as 1
    monkeypatch.delenv("PJRT_REF_NUM_DEVICES", raising=False)
    assert _device_count() == 1


# ------------------------------------------------------------------ the compile key
def another_text(setting) -> str:
    """A text `setting` accepts, other than its text now and other than 0
    (PJRT_REF_PROGRAM_CACHE=0 would turn the cache under test off)."""
    now = os.environ.get(setting.name, "").strip()
    return next(text for text, value in accepted_texts(setting)
                if text.strip() != now and value not in (0, False, None))


def keyed_and_unkeyed() -> tuple[list, list]:
    keyed = [s for s in SETTINGS.values() if s.in_compile_key]
    return keyed, [s for s in SETTINGS.values() if not s.in_compile_key]


def test_the_compile_key_is_the_settings_flagged_for_it():
    keyed, unkeyed = keyed_and_unkeyed()
    assert settings.compile_key_names() == tuple(s.name for s in keyed)
    assert keyed and unkeyed and len(settings.texts()) == len(keyed)


def test_the_program_cache_keeps_a_program_per_text_of_each_keyed_setting_only():
    """A compile under another value of a keyed setting is a fresh one; under
    another value of any other setting, the kept executable comes back."""
    from pjrt_ref.model import program_cache

    made = []

    def compile_once():
        made.append(object())
        return made[-1]

    def compiled():
        return program_cache.compiled("mlir", b"module {}", b"", compile_once)

    keyed, unkeyed = keyed_and_unkeyed()
    program_cache.clear()
    # Room for a program per keyed setting: none is pushed out while the test runs.
    try:
        with settings.override(PJRT_REF_PROGRAM_CACHE=str(len(SETTINGS) + 1)):
            first = compiled()
            for setting in unkeyed:
                with settings.override(**{setting.name: another_text(setting)}):
                    assert compiled() is first, setting.name
            for setting in keyed:
                with settings.override(**{setting.name: another_text(setting)}):
                    assert compiled() is not first, setting.name
            assert compiled() is first
    finally:
        program_cache.clear()         # the fake executables must not outlive the test


def test_the_fingerprint_changes_with_each_keyed_setting_only_and_names_the_platform_version():
    from pjrt_ref.model.topology import platform_version

    base = settings.fingerprint()
    assert base == settings.fingerprint() and base in platform_version()
    keyed, unkeyed = keyed_and_unkeyed()
    seen = {base}
    for setting in keyed:
        with settings.override(**{setting.name: another_text(setting)}):
            seen.add(settings.fingerprint())
            assert settings.fingerprint() in platform_version()
    assert len(seen) == 1 + len(keyed) and settings.fingerprint() == base
    for setting in unkeyed:
        with settings.override(**{setting.name: another_text(setting)}):
            assert settings.fingerprint() == base, setting.name
