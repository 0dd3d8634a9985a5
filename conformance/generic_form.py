"""Rewrite the test-only dialects' custom syntax into MLIR's generic form.

StableHLO's interpreter tests use two dialects that only exist in upstream's
test tools: `check` (stablehlo/tests/CheckOps.td) and `interpreter`
(stablehlo/reference/InterpreterOps.td). jaxlib does not register them, and
MLIR can parse an unregistered op only in the generic form
`"check.expect_eq"(%a, %b) : (tensor<3xi64>, tensor<3xi64>) -> ()`.
So before parsing, each such statement written in its custom form, e.g.

    check.expect_eq %a, %b : tensor<3xi64>
    check.expect_almost_eq_const %x, dense<[1.0, 2.0]> : tensor<2xf32>, tolerance = 0.01
    check.expect_close %a, %b, max_ulp_difference = 3 : tensor<2xf16>, tensor<2xf16>
    %p = interpreter.probe %x, probe_id = "p0" : tensor<2xi64>

is rewritten to its generic form, following the ops' `assemblyFormat`s. A
statement may span several lines; the rewritten text keeps the line count so
that locations still point into the original file.
"""
from __future__ import annotations

import re

# Per op: the custom syntax's keyword -> (attribute name, attribute type).
_KEYWORD_ATTRS = {
    "tolerance": ("tolerance", "f64"),
    "max_ulp_difference": ("max_ulp_difference", "ui64"),
    "min_ulp_difference": ("min_ulp_difference", "ui64"),
    "probe_id": ("probe_id", None),
    "iter": ("iteration", "ui32"),
}
# Ops whose second "operand" is a constant attribute `value`.
_CONST_OPS = ("check.expect_eq_const", "check.expect_almost_eq_const")
# Ops with one result of the operand's type.
_PASS_THROUGH_OPS = ("interpreter.probe",)

_STATEMENT_START = re.compile(
    r"^(?P<indent>\s*)(?P<result>%[\w.$#:-]+\s*=\s*)?"
    r"(?P<name>check\.expect_\w+|interpreter\.probe|interpreter\.print)\b(?P<rest>.*)$")
# The same ops already in generic form; their attributes may be written as
# properties `<{...}>`, which the bindings do not show for unregistered ops.
_GENERIC_START = re.compile(
    r'^(?P<head>\s*(?:%[\w.$#:-]+\s*=\s*)?"(?:check|interpreter)\.\w+"\s*)(?P<rest>\(.*)$')
_OPEN = "<([{"
_CLOSE = ">)]}"


def to_generic_form(text: str) -> str:
    """`text` with every custom-form check/interpreter op made generic."""
    if "check." not in text and "interpreter." not in text:
        return text
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        if _STATEMENT_START.match(lines[i]):
            rewrite = _custom_to_generic
        elif _GENERIC_START.match(lines[i]):
            rewrite = _properties_to_attributes
        else:
            out.append(lines[i])
            i += 1
            continue
        statement, used = _gather_statement(lines, i)
        try:
            generic = rewrite(statement)
        except ValueError:
            generic = None  # leave it to the parser to report
        if generic is None:
            out.extend(lines[i:i + used])
        else:
            out.append(generic)
            out.extend([""] * (used - 1))
        i += used
    return "\n".join(out)


def _custom_to_generic(statement: str) -> str | None:
    match = _STATEMENT_START.match(statement)
    generic = _rewrite(match["name"], match["rest"])
    if generic is None:
        return None
    return match["indent"] + (match["result"] or "") + generic


def _properties_to_attributes(statement: str) -> str | None:
    """`"op"(%a) <{p = 1}> {q = 2} : T` -> `"op"(%a) {p = 1, q = 2} : T`."""
    match = _GENERIC_START.match(statement)
    rest = match["rest"]
    operands_end = _matching(rest, 0, "(", ")")
    after = rest[operands_end + 1:].lstrip()
    if not after.startswith("<{"):
        return None
    properties_end = _matching(after, 1, "{", "}")
    properties = after[2:properties_end].strip()
    tail = after[properties_end + 1:].lstrip()
    if not tail.startswith(">"):
        return None
    tail = tail[1:].lstrip()
    entries = [properties] if properties else []
    if tail.startswith("{"):
        attrs_end = _matching(tail, 0, "{", "}")
        entries.append(tail[1:attrs_end].strip())
        tail = tail[attrs_end + 1:].lstrip()
    attr_text = " {" + ", ".join(e for e in entries if e) + "}" if any(entries) else ""
    return f"{match['head']}{rest[:operands_end + 1]}{attr_text} {tail}"


def _matching(text: str, open_index: int, open_char: str, close_char: str) -> int:
    """Index of the bracket closing the one at `open_index` (strings skipped)."""
    depth = 0
    in_string = False
    for i in range(open_index, len(text)):
        ch = text[i]
        if ch == '"' and (i == 0 or text[i - 1] != "\\"):
            in_string = not in_string
        elif in_string:
            continue
        elif ch == open_char:
            depth += 1
        elif ch == close_char:
            depth -= 1
            if depth == 0:
                return i
    raise ValueError(f"unbalanced '{open_char}'")


def _gather_statement(lines: list[str], start: int) -> tuple[str, int]:
    """Join lines from `start` until brackets balance and no ',' dangles."""
    parts = []
    index = start
    while index < len(lines):
        parts.append(_strip_comment(lines[index]).strip() if parts else
                     _strip_comment(lines[index]).rstrip())
        index += 1
        joined = " ".join(parts)
        if _depth(joined) <= 0 and not joined.rstrip().endswith(","):
            break
    return " ".join(parts), index - start


def _strip_comment(line: str) -> str:
    in_string = False
    for i, ch in enumerate(line):
        if ch == '"' and (i == 0 or line[i - 1] != "\\"):
            in_string = not in_string
        elif not in_string and line.startswith("//", i):
            return line[:i]
    return line


def _outside_strings(text: str):
    """Yield (index, char, depth) for each character outside string literals;
    depth counts the brackets open before it (`->` is no bracket)."""
    depth = 0
    in_string = False
    for i, ch in enumerate(text):
        if ch == '"' and (i == 0 or text[i - 1] != "\\"):
            in_string = not in_string
            continue
        if in_string:
            continue
        if ch in _CLOSE and not (ch == ">" and i > 0 and text[i - 1] == "-"):
            depth -= 1
        yield i, ch, depth
        if ch in _OPEN:
            depth += 1


def _depth(text: str) -> int:
    """Brackets left open at the end of `text`."""
    depth = 0
    for _, ch, before in _outside_strings(text):
        depth = before + (1 if ch in _OPEN else 0)
    return depth


def split_top_level(text: str, separator: str) -> list[str]:
    """Split `text` at `separator` where no bracket or string is open."""
    pieces = []
    start = 0
    for i, _, depth in _outside_strings(text):
        if depth == 0 and i >= start and text.startswith(separator, i):
            pieces.append(text[start:i])
            start = i + len(separator)
    pieces.append(text[start:])
    return [p.strip() for p in pieces]


def _take_trailing_attr_dict(text: str) -> tuple[str, str]:
    """Split `... {a = 1}` into ('...', 'a = 1'); no dict gives (text, '')."""
    text = text.strip()
    if not text.endswith("}"):
        return text, ""
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        if text[i] == "}":
            depth += 1
        elif text[i] == "{":
            depth -= 1
            if depth == 0:
                return text[:i].strip(), text[i + 1:-1].strip()
    return text, ""


def _keyword_attr(item: str) -> str:
    key, _, value = item.partition("=")
    key, value = key.strip(), value.strip()
    if key not in _KEYWORD_ATTRS:
        raise ValueError(f"unknown keyword {key}")
    name, attr_type = _KEYWORD_ATTRS[key]
    if attr_type and ":" not in value:
        value = f"{value} : {attr_type}"
    return f"{name} = {value}"


def _rewrite(name: str, rest: str) -> str | None:
    rest = rest.strip()
    if not rest or rest.startswith(("(", '"')):
        return None  # already generic (or not an op statement at all)
    if name in _CONST_OPS:
        return _rewrite_const(name, rest)
    return _rewrite_with_types(name, rest)


def _rewrite_const(name: str, rest: str) -> str:
    """`%x, dense<...> : T (, tolerance = X)? {attrs}?`."""
    items = split_top_level(rest, ",")
    operand, value_items = items[0], items[1:]
    attrs = []
    value = None
    for item in value_items:
        item, attr_dict = _take_trailing_attr_dict(item)
        if attr_dict:
            attrs.append(attr_dict)
        if value is None:
            value = item
        else:
            attrs.append(_keyword_attr(item))
    if value is None:
        raise ValueError("constant check without a value")
    value_type = split_top_level(value, ":")[-1]
    attrs.insert(0, f"value = {value}")
    return f'"{name}"({operand}) {{{", ".join(attrs)}}} : ({value_type}) -> ()'


def _rewrite_with_types(name: str, rest: str) -> str:
    """`%a (, %b)* (, key = value)* {attrs}? : {attrs}? T (, T)*`."""
    head, types_text = _split_types(rest)
    head, attr_dict = _take_trailing_attr_dict(head)
    attrs = [attr_dict] if attr_dict else []
    types_text = types_text.strip()
    if types_text.startswith("{"):
        end = _matching(types_text, 0, "{", "}")
        attrs.append(types_text[1:end].strip())
        types_text = types_text[end + 1:].strip()
    operands = []
    for item in split_top_level(head, ","):
        if item.startswith("%"):
            operands.append(item)
        elif item:
            attrs.append(_keyword_attr(item))
    types = split_top_level(types_text, ",")
    if len(types) == 1 and len(operands) > 1:
        types = types * len(operands)
    if len(types) != len(operands):
        raise ValueError("operand and type counts differ")
    results = f"({types[0]})" if name in _PASS_THROUGH_OPS else "()"
    attr_text = f" {{{', '.join(a for a in attrs if a)}}}" if any(attrs) else ""
    return f'"{name}"({", ".join(operands)}){attr_text} : ({", ".join(types)}) -> {results}'


def _split_types(rest: str) -> tuple[str, str]:
    """Split at the first top-level ':' that follows all operands/keywords.

    Keyword values never contain a top-level ':' in the custom syntax (their
    types are implied), so the first top-level ':' starts the type list.
    """
    pieces = split_top_level(rest, ":")
    if len(pieces) < 2:
        raise ValueError("no type list")
    return pieces[0], ":".join(pieces[1:])
