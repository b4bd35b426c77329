"""One Rust type per name: no two types (struct, enum, union, trait, type
alias) of the rust/ workspace share a name, in any crate, test or bench, so
that a name in a message, a backtrace or a review says which type it is.

Read from the source (nothing is built): comments, strings and char
literals are blanked, then every `struct|enum|union|trait|type Name` counts
except an associated type (`type Target = ...` in an impl, `type Layout;`
in a trait), which lives in its trait's namespace and whose name is often
the trait's to choose (`Deref::Target`, `TryFrom::Error`). A type that a
macro invocation defines (`wire_enum! { pub enum ScalarOp as "op" { .. } }`)
counts; one that a `macro_rules!` body spells `$name` does not.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

RUST = Path(__file__).resolve().parents[2] / "rust"

# What is not code: comments (block comments nest in Rust), strings (raw,
# byte and plain), char literals. Lifetimes ('a) are code and stay.
_NOT_CODE = re.compile(
    r"""
      //[^\n]*
    | /\*
    | b?r(?P<hashes>\#*)".*?"(?P=hashes)
    | b?"(?:\\.|[^"\\])*"
    | b?'(?:\\u\{[0-9a-fA-F]+\}|\\.|[^'\\\n])'
    """,
    re.S | re.X,
)
_DEFINITION = re.compile(r"(?<![\w$])(?P<kw>struct|enum|union|trait|type)\s+(?P<name>[A-Z][A-Za-z0-9_]*)")
# A block whose items are associated: an impl's or a trait's body.
_ASSOC_HEADER = re.compile(r"^(?:\#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?(?:unsafe\s+)?(?:impl|trait)\b")


def _blank(text: str) -> str:
    """`text` with every comment, string and char literal replaced by spaces
    (newlines kept, so offsets and line numbers stay)."""
    out, pos = [], 0
    while True:
        m = _NOT_CODE.search(text, pos)
        if m is None:
            out.append(text[pos:])
            return "".join(out)
        out.append(text[pos : m.start()])
        end = m.end()
        if m.group() == "/*":
            depth = 1
            while depth and end < len(text):
                pair = text[end : end + 2]
                depth += {"/*": 1, "*/": -1}.get(pair, 0)
                end += 2 if pair in ("/*", "*/") else 1
        out.append(re.sub(r"[^\n]", " ", text[m.start() : end]))
        pos = end


def _associated(code: str) -> list[bool]:
    """Per offset of `code` (blanked): whether the innermost block around it
    is an impl's or a trait's body."""
    inside = [False] * (len(code) + 1)
    stack: list[bool] = []
    header_start = 0
    for i, ch in enumerate(code):
        inside[i] = bool(stack) and stack[-1]
        if ch == "{":
            stack.append(bool(_ASSOC_HEADER.match(code[header_start:i].strip())))
            header_start = i + 1
        elif ch == "}":
            if stack:
                stack.pop()
            header_start = i + 1
        elif ch == ";":
            header_start = i + 1
    return inside


def _definitions(path: Path) -> list[tuple[str, str]]:
    """(name, "path:line kind") of every type `path` defines."""
    code = _blank(path.read_text())
    associated = _associated(code)
    found = []
    for m in _DEFINITION.finditer(code):
        if m["kw"] == "type" and associated[m.start()]:
            continue
        line = code.count("\n", 0, m.start()) + 1
        found.append((m["name"], f"{path.relative_to(RUST.parent)}:{line} {m['kw']}"))
    return found


def _all_definitions() -> dict[str, list[str]]:
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in sorted(RUST.rglob("*.rs")):
        if "target" in path.relative_to(RUST).parts:
            continue
        for name, where in _definitions(path):
            by_name[name].append(where)
    return by_name


def test_reader_sees_known_definitions():
    """The reader itself: definitions of each kind are found, associated
    types and text in comments and strings are not."""
    defs = _all_definitions()
    assert "rust/core/src/error.rs" in " ".join(defs["RtError"])  # struct
    assert "rust/programs/src/scalar/ops.rs" in " ".join(defs["ScalarOp"])  # enum in wire_enum!
    assert "rust/programs/src/program_words.rs" in " ".join(defs["ProgramKind"])  # trait
    assert "rust/programs/src/error.rs" in " ".join(defs["ProgramResult"])  # type alias
    assert "Target" not in defs  # `type Target = ...` of Deref impls only
    sample = (
        "// struct Commented;\n"
        "/* enum Blocked { /* nested */ } */\n"
        'const S: &str = "struct Quoted {";\n'
        "const C: char = '{';\n"
        "pub struct Real<'a>(&'a str);\n"
        "impl<'a> std::ops::Deref for Real<'a> {\n"
        "    type Target = str;\n"
        "    fn deref(&self) -> &str {\n"
        "        type Local = u8;\n"
        "        self.0\n"
        "    }\n"
        "}\n"
        "trait Kind {\n"
        "    type Assoc;\n"
        "}\n"
        "mod inner {\n"
        "    pub type Alias = u32;\n"
        "}\n"
    )
    code = _blank(sample)
    associated = _associated(code)
    names = [m["name"] for m in _DEFINITION.finditer(code) if not (m["kw"] == "type" and associated[m.start()])]
    assert names == ["Real", "Local", "Kind", "Alias"]


def test_one_rust_type_per_name():
    shared = {name: wheres for name, wheres in _all_definitions().items() if len(wheres) > 1}
    listing = "\n".join(f"  {name}: " + ", ".join(wheres) for name, wheres in sorted(shared.items()))
    assert not shared, "Rust types sharing a name (give each one that says what it is):\n" + listing
