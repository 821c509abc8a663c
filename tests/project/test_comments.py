"""Comments and docstrings say what and why, not what was measured where (issue #45).

Every comment and docstring line under edgenn/ (*.py, *.pyx, *.pxi, *.h) is scanned for
a CPU model (EPYC, Xeon, Zen <n>, Sapphire Rapids, Ice Lake, Alder Lake, "family <n>
model <n>") and for a measured timing (a number in us / ms / µs / ns, or a speed ratio
such as "0.96x" beside faster / slower / ran / measured / timed). Such figures belong in
commit messages and benchmark records: in a comment they go stale and say nothing about
the invariant the code keeps. Only comment text counts; code and other strings do not.
"""
from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "edgenn"
SUFFIXES = (".py", ".pyx", ".pxi", ".h")

CPU_MODEL = re.compile(r"\bEPYC\b|\bXeon\b|\bZen ?\d|\bSapphire Rapids\b|\bIce Lake\b"
                       r"|\bAlder Lake\b|\bfamily \d+ model \d+", re.IGNORECASE)
TIMING = re.compile(r"\d\s?(?:us|ms|µs|ns)\b")
RATIO = re.compile(r"(?<![\w.])\d+(?:\.\d+)?x(?![\w])")
SPEED_WORDS = re.compile(r"\b(?:faster|slower|ran|measured|timed)\b", re.IGNORECASE)


def _python_comments(text: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring line of Python or Cython source.

    Docstrings: a statement made of string literals only (a module's, class's or
    function's first statement, or an attribute's docstring after it). Cython's syntax
    tokenizes as Python does for this purpose (cdef, casts and pointers are names and
    operators)."""
    out: list[tuple[int, str]] = []
    toks = tokenize.generate_tokens(io.StringIO(text).readline)
    at_statement_start = True
    pending: list[tokenize.TokenInfo] = []      # the strings of a possible docstring
    for tok in toks:
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string))
            continue
        if tok.type in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING):
            continue
        if tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            for s in pending:                   # the statement was strings alone
                for i, line in enumerate(s.string.splitlines()):
                    out.append((s.start[0] + i, line))
            pending = []
            at_statement_start = True
            continue
        if tok.type == tokenize.STRING and (at_statement_start or pending):
            pending.append(tok)
        else:
            pending = []
        at_statement_start = False
    return out


def _c_comments(text: str) -> list[tuple[int, str]]:
    """(line, text) of every line of // and /* */ comments in C source, string and
    character literals skipped."""
    out: list[tuple[int, str]] = []
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            line += text.count("\n", i, j + 1)
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append((line, text[i:j]))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k, part in enumerate(text[i:j].split("\n")):
                out.append((line + k, part))
            line += text.count("\n", i, j)
            i = j
        else:
            i += 1
    return out


def _hits(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    lines = _c_comments(text) if path.suffix == ".h" else _python_comments(text)
    rel = path.relative_to(ROOT.parent)
    found = []
    for lineno, comment in lines:
        if (CPU_MODEL.search(comment) or TIMING.search(comment)
                or (RATIO.search(comment) and SPEED_WORDS.search(comment))):
            found.append(f"{rel}:{lineno}: {comment.strip()}")
    return found


def _sources() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*") if p.suffix in SUFFIXES and p.is_file())


def test_scanners_see_only_comments():
    py = 'x = "12 ms on a Xeon"\ndef f():\n    """Runs in 3 ms."""\n    return 1  # Zen 4\n'
    assert [n for n, _ in _python_comments(py)] == [3, 4]
    c = 'const char *s = "9 us /* Xeon */";\n/* a\n * 5 ms */ int x; // EPYC\n'
    assert [n for n, _ in _c_comments(c)] == [2, 3, 3]
    assert not RATIO.search("a 1x1 conv, 3x3 taps, 2x2/s2 pooling")
    assert RATIO.search("ran 0.96x the old time") and RATIO.search("4.6x the rate")


def test_no_cpu_models_or_timings_in_comments():
    assert _sources(), ROOT
    found = [hit for path in _sources() for hit in _hits(path)]
    assert not found, ("comments citing a CPU model or a measured timing (say why, in "
                       "general terms, instead):\n" + "\n".join(found))
