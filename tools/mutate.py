#!/usr/bin/env python3
"""Mutation testing of the cores (issue 13): is the simulator's proof complete?

Generates mutants of src/core/*.c mechanically, compiles each one into the
simulator and runs it against the swarm seeds and every fault plan. A mutant
that a run catches is killed; one that passes everything survived, and each
survivor is either a hole in the checker, the faults or the plans, or an
equivalent mutant (recorded in tools/mutate_equivalent.txt with the reason).

Operators (each mutant's id is file:line:col:operator:index, stable while the
code around it is unchanged):
  ror     a comparison flipped: < to <= and >=, == to !=, ...
  bound   the other side of a relation off by one (the direction that <= vs <
          does not already cover): a < n to a < (n) - 1, a <= n to a <= (n) + 1
  const   an integer constant off by one: n to n+1 and n-1
  logic   && and || swapped
  cond    an if/while condition negated: if (x) to if (!(x))
  drop    an expression statement (assignment, increment or call) removed
  ret     a returned value replaced: true/false flipped, !(x), 0, 1, NULL, or
          an early `return;` removed

Not mutated: comments, string and character literals, preprocessor lines, code
that is not compiled with CAPSTORE_MUTANT=0 (the hand-written mutants' blocks),
static assertions, assert() arguments, array sizes in declarations, case
labels, sizeof operands and anything outside function bodies.

Each mutant builds in a private copy of the tree (one per job, under --work):
the mutated file replaces the original, `ninja capstore-sim` rebuilds
incrementally, then `capstore-sim --seeds N --quiet --stop-on-failure` and each
plan in faults/plans run until one catches it. Exit codes of the simulator:
3 crash, 4 safety, 5 liveness, 6 plan expectation = killed; 7 a simulator table
bound (not a finding, listed apart); 2 usage: a tool error, unless the
unmutated simulator took the same arguments and plans in the baseline (then
the mutant broke a parse the simulator shares with the cores, such as
cs_decimal_u64 in faults/plan.c: killed, "refused input"). A mutant that does
not compile (the project's -Werror flags) is stillborn and not counted; one
that runs past --timeout is killed ("timeout") and listed apart.

A mutant that survives the simulator then meets the cores' unit tests
(CORE_UNIT_TESTS; --no-unit skips them): one that fails them is listed as
"unit_killed". The score is the simulator's (killed over killed, survived and
unit_killed: the proof this tool measures); the report gives the score with
the unit tests beside it.

Python 3 standard library only.
"""

import argparse
import concurrent.futures
import datetime
import difflib
import fcntl
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORE_DIR = "src/core"
EQUIVALENT_FILE = "tools/mutate_equivalent.txt"
# The unit tests of the cores (tests/test_*.c, built with the mutated core): run for a simulator survivor.
CORE_UNIT_TESTS = ("test_service", "test_service_lease", "test_service_reconcile", "test_service_reconcile_keys",
                   "test_engine", "test_sink", "test_types", "test_read_plan", "test_array", "test_array_chunk",
                   "test_array_meta", "test_array_read", "test_array_winners", "test_plan", "test_config")

# ---------------------------------------------------------------------------
# Tokens


class Tok:
    __slots__ = ("kind", "text", "start", "end", "line", "col")

    def __init__(self, kind, text, start, end, line, col):
        self.kind, self.text, self.start, self.end, self.line, self.col = kind, text, start, end, line, col

    def __repr__(self):
        return "%s:%d:%d:%r" % (self.kind, self.line, self.col, self.text)


PUNCTUATORS = sorted(
    "... <<= >>= -> ++ -- << >> <= >= == != && || += -= *= /= %= &= ^= |= ## "
    "[ ] ( ) { } . & * + - ~ ! / % < > ^ | ? : ; = , #".split(),
    key=len, reverse=True)
LITERAL_RE = re.compile(r"(?:u8|[uUL])?(['\"])")
INT_RE = re.compile(r"^(0[xX][0-9a-fA-F]+|[1-9][0-9]*|0)([uUlL]*)$")


def tokenize(text):
    """C tokens with offsets; comments and whitespace dropped, each
    preprocessor directive one 'pp' token (continuation lines included)."""
    toks = []
    i, n = 0, len(text)
    line, line_start = 1, 0
    at_line_start = True

    def newline_count(a, b):
        return text.count("\n", a, b)

    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            line_start = i + 1
            at_line_start = True
            i += 1
            continue
        if c in " \t\r\f\v":
            i += 1
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise ValueError("unterminated comment at line %d" % line)
            k = newline_count(i, j + 2)
            if k:
                line += k
                line_start = text.rfind("\n", i, j + 2) + 1
            i = j + 2
            continue
        col = i - line_start + 1
        if c == "#" and at_line_start:
            j = i
            while True:
                e = text.find("\n", j)
                if e < 0:
                    e = n
                    break
                if text[e - 1] == "\\" or (text[e - 1] == "\r" and text[e - 2] == "\\"):
                    j = e + 1
                    continue
                break
            toks.append(Tok("pp", text[i:e], i, e, line, col))
            k = newline_count(i, e)
            if k:
                line += k
                line_start = text.rfind("\n", i, e) + 1
            i = e
            continue
        at_line_start = False
        m = LITERAL_RE.match(text, i)  # i starts a token, so a prefix is one
        if m:
            q = m.group(1)
            j = m.end()
            while j < n and text[j] != q:
                if text[j] == "\\":
                    j += 1
                if text[j] == "\n":
                    raise ValueError("newline in literal at line %d" % line)
                j += 1
            toks.append(Tok("str" if q == '"' else "chr", text[i:j + 1], i, j + 1, line, col))
            i = j + 1
            continue
        if c.isalpha() or c == "_":
            m = re.compile(r"[A-Za-z_0-9]+").match(text, i)
            toks.append(Tok("id", m.group(0), i, m.end(), line, col))
            i = m.end()
            continue
        if c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
            m = re.compile(r"\.?[0-9](?:[eEpP][+-]|[0-9A-Za-z_.])*").match(text, i)
            toks.append(Tok("num", m.group(0), i, m.end(), line, col))
            i = m.end()
            continue
        for p in PUNCTUATORS:
            if text.startswith(p, i):
                toks.append(Tok("op", p, i, i + len(p), line, col))
                i += len(p)
                break
        else:
            raise ValueError("unexpected character %r at line %d" % (c, line))
    return toks


def pp_condition(directive):
    """The value of an #if/#elif condition with CAPSTORE_MUTANT=0, or None
    when it does not depend on CAPSTORE_MUTANT (then both branches count)."""
    expr = re.sub(r"/\*.*?\*/|//.*", "", directive, flags=re.S)
    expr = re.sub(r"^\s*#\s*(el)?if\s*", "", expr).replace("\\\n", " ")
    if "CAPSTORE_MUTANT" not in expr:
        return None
    expr = re.sub(r"defined\s*\(?\s*CAPSTORE_MUTANT\s*\)?", "1", expr)
    expr = expr.replace("CAPSTORE_MUTANT", "0")
    expr = expr.replace("&&", " and ").replace("||", " or ")
    expr = re.sub(r"!(?!=)", " not ", expr)
    if not re.fullmatch(r"[\d\s()=!<>]*|[\d\s()=!<>andort]*", expr):
        return None
    try:
        return bool(eval(expr, {"__builtins__": {}}, {}))  # digits and operators only
    except Exception:
        return None


def active_tokens(toks):
    """The tokens the compiler sees with CAPSTORE_MUTANT=0 (other macros are
    taken to be on both branches: only CAPSTORE_MUTANT decides here)."""
    out = []
    stack = []  # (parent_active, branch_active, taken)
    active = True
    for t in toks:
        if t.kind != "pp":
            if active:
                out.append(t)
            continue
        m = re.match(r"#\s*(\w+)\s*(\w*)", t.text)
        d = m.group(1) if m else ""
        if d in ("if", "ifdef", "ifndef"):
            if d == "if":
                v = pp_condition(t.text)
            elif m.group(2) == "CAPSTORE_MUTANT":
                v = d == "ifdef"
            else:
                v = None
            branch = True if v is None else v
            stack.append([active, branch, branch, v is None])
            active = active and branch
        elif d == "elif" and stack:
            f = stack[-1]
            v = pp_condition(t.text)
            branch = (True if v is None else v) and (f[3] or not f[2])
            f[1] = branch
            f[2] = f[2] or branch
            active = f[0] and branch
        elif d == "else" and stack:
            f = stack[-1]
            branch = f[3] or not f[2]
            f[1] = branch
            f[2] = True
            active = f[0] and branch
        elif d == "endif" and stack:
            active = stack.pop()[0]
    return out


# ---------------------------------------------------------------------------
# Structure: function bodies, statements, places not to mutate

TYPE_WORDS = {"void", "char", "short", "int", "long", "float", "double", "signed", "unsigned", "_Bool", "bool",
              "struct", "union", "enum", "static", "const", "volatile", "register", "extern", "inline",
              "_Alignas", "_Thread_local", "typedef", "size_t"}
INT_TYPES = {"int", "unsigned", "long", "short", "char", "size_t", "ssize_t", "uint8_t", "uint16_t", "uint32_t",
             "uint64_t", "int8_t", "int16_t", "int32_t", "int64_t", "uintptr_t", "intptr_t", "signed"}
KEYWORDS = {"if", "else", "while", "do", "for", "switch", "case", "default", "return", "break", "continue",
            "goto", "sizeof", "_Static_assert", "static_assert"} | TYPE_WORDS
ASSIGN = {"=", "+=", "-=", "*=", "/=", "%=", "&=", "^=", "|=", "<<=", ">>="}
RELATIONAL = {"<", "<=", ">", ">="}
COMPARISON = RELATIONAL | {"==", "!="}


class Func:
    def __init__(self, name, ret_type, body_open, body_close):
        self.name, self.ret_type, self.body_open, self.body_close = name, ret_type, body_open, body_close


def match_close(toks, i):
    """Index of the bracket closing toks[i]."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    o, c = toks[i].text, pairs[toks[i].text]
    depth = 0
    for j in range(i, len(toks)):
        if toks[j].text == o and toks[j].kind == "op":
            depth += 1
        elif toks[j].text == c and toks[j].kind == "op":
            depth -= 1
            if depth == 0:
                return j
    raise ValueError("unbalanced %r at line %d" % (o, toks[i].line))


def match_open(toks, j):
    pairs = {")": "(", "]": "[", "}": "{"}
    c, o = toks[j].text, pairs[toks[j].text]
    depth = 0
    for i in range(j, -1, -1):
        if toks[i].text == c and toks[i].kind == "op":
            depth += 1
        elif toks[i].text == o and toks[i].kind == "op":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("unbalanced %r at line %d" % (c, toks[j].line))


def find_functions(toks):
    """Function definitions at file scope: a '{' after ')' at brace depth 0."""
    funcs = []
    i = 0
    while i < len(toks):
        t = toks[i]
        if t.text == "{" and t.kind == "op":
            close = match_close(toks, i)
            if i > 0 and toks[i - 1].text == ")":
                po = match_open(toks, i - 1)
                name_i = po - 1
                k = name_i - 1
                while k >= 0 and toks[k].text not in (";", "}", "{") and toks[k].kind != "pp":
                    k -= 1
                ret = [x.text for x in toks[k + 1:name_i]]
                funcs.append(Func(toks[name_i].text, ret, i, close))
            i = close + 1
            continue
        i += 1
    return funcs


class Stmt:
    def __init__(self, kind, first, last):
        self.kind, self.first, self.last = kind, first, last  # token indices, last is ';' where there is one


class Walker:
    """A small recursive statement parser over one function body."""

    def __init__(self, toks, func):
        self.toks, self.func = toks, func
        self.stmts = []  # simple statements: 'expr', 'decl', 'return', 'assert', 'other'
        self.conds = []  # (open paren, close paren) of if/while conditions
        self.skip = set()  # token indices not to mutate
        self.cases = []

    def t(self, i):
        return self.toks[i].text

    def block(self, i):
        assert self.t(i) == "{"
        close = match_close(self.toks, i)
        j = i + 1
        while j < close:
            j = self.statement(j)
        return close + 1

    def paren(self, i):
        if self.t(i) != "(":
            raise ValueError("expected ( at line %d" % self.toks[i].line)
        return match_close(self.toks, i)

    def simple_end(self, i):
        j = i
        while self.t(j) != ";":
            if self.t(j) in ("(", "[", "{") and self.toks[j].kind == "op":
                j = match_close(self.toks, j)
            j += 1
        return j

    def statement(self, i):
        w = self.t(i)
        kind = self.toks[i].kind
        if w == "{":
            return self.block(i)
        if kind == "id" and w in ("if", "while", "switch"):
            c = self.paren(i + 1)
            if w != "switch":
                self.conds.append((i + 1, c))
            j = self.statement(c + 1)
            if w == "if" and j < len(self.toks) and self.t(j) == "else":
                j = self.statement(j + 1)
            return j
        if kind == "id" and w == "for":
            c = self.paren(i + 1)
            return self.statement(c + 1)
        if kind == "id" and w == "do":
            j = self.statement(i + 1)
            assert self.t(j) == "while"
            c = self.paren(j + 1)
            self.conds.append((j + 1, c))
            return c + 2
        if kind == "id" and w in ("case", "default"):
            j = i
            while self.t(j) != ":":
                self.skip.add(j)
                j += 1
            return j + 1
        if kind == "id" and w not in KEYWORDS and self.t(i + 1) == ":":
            return i + 2  # a label
        end = self.simple_end(i)
        self.stmts.append(Stmt(self.classify(i, end), i, end))
        return end + 1

    def classify(self, i, end):
        w = self.t(i)
        if w in ("return",):
            return "return"
        if w in ("break", "continue", "goto") or i == end:
            return "other"
        if w in ("_Static_assert", "static_assert", "assert"):
            return "assert"
        if w in TYPE_WORDS:
            return "decl"
        if self.toks[i].kind == "id" and end - i >= 2:
            a, b = self.toks[i + 1], self.toks[i + 2]
            if a.kind == "id":
                return "decl"
            if a.text == "*" and b.kind == "id" and end - i >= 3 and self.t(i + 3) in ("=", ";", ",", "["):
                return "decl"
        return "expr"


def skipped_tokens(toks, func, walker):
    """Token indices inside the body that are not mutated."""
    skip = set(walker.skip)
    for s in walker.stmts:
        if s.kind == "assert":
            skip.update(range(s.first, s.last + 1))
        if s.kind == "decl":
            # array sizes of the declarators: brackets before any '=' at depth 0
            j = s.first
            while j < s.last:
                tx = toks[j].text
                if tx == "=":
                    # skip the initializer, but then look for the next declarator after ','
                    j = _skip_expr(toks, j + 1, s.last)
                    continue
                if tx == "[":
                    c = match_close(toks, j)
                    skip.update(range(j, c + 1))
                    j = c + 1
                    continue
                j += 1
    # assert(...) anywhere, sizeof operands
    for j in range(func.body_open, func.body_close):
        tx = toks[j].text
        if toks[j].kind == "id" and tx in ("assert", "sizeof", "_Static_assert", "static_assert") \
                and toks[j + 1].text == "(":
            skip.update(range(j, match_close(toks, j + 1) + 1))
    return skip


def _skip_expr(toks, j, last):
    while j < last and toks[j].text != ",":
        if toks[j].text in ("(", "[", "{"):
            j = match_close(toks, j)
        j += 1
    return j + 1


# Operand extents for binary operators (token indices, inclusive).
def right_extent(toks, op, stop, limit):
    j = op + 1
    while j < limit:
        tx = toks[j].text
        if toks[j].kind == "op":
            if tx in ("(", "[", "{"):
                j = match_close(toks, j) + 1
                continue
            if tx in (")", "]", "}") or tx in stop:
                break
        j += 1
    return op + 1, j - 1


def left_extent(toks, op, stop, limit):
    j = op - 1
    while j > limit:
        tx = toks[j].text
        if toks[j].kind == "op":
            if tx in (")", "]", "}"):
                j = match_open(toks, j) - 1
                continue
            if tx in ("(", "[", "{") or tx in stop:
                break
        elif tx in ("return", "case"):
            break
        j -= 1
    return j + 1, op - 1


BASE_STOP = {";", ",", "?", ":"} | ASSIGN
REL_RHS_STOP = BASE_STOP | {"&&", "||", "&", "|", "^"} | COMPARISON
AND_STOP_LEFT = BASE_STOP | {"||"}
AND_STOP_RIGHT = BASE_STOP | {"||", "&&"}
OR_STOP_LEFT = BASE_STOP
OR_STOP_RIGHT = BASE_STOP | {"||"}


def has_logic(toks, a, b):
    j = a
    while j <= b:
        if toks[j].text in ("(", "[", "{") and toks[j].kind == "op":
            j = match_close(toks, j) + 1
            continue
        if toks[j].text in ("&&", "||"):
            return True
        j += 1
    return False


# ---------------------------------------------------------------------------
# Mutants


class Mutant:
    def __init__(self, path, tok, op, index, edits, desc):
        self.path = path  # relative to the repository root
        self.line, self.col = tok.line, tok.col
        self.op, self.index = op, index
        self.edits = edits  # [(start, end, replacement)]
        self.desc = desc
        self.id = "%s:%d:%d:%s:%d" % (os.path.basename(path), tok.line, tok.col, op, index)

    def apply(self, text):
        for start, end, rep in sorted(self.edits, key=lambda e: (e[0], e[1]), reverse=True):
            text = text[:start] + rep + text[end:]
        return text


ROR_ALTERNATIVES = {"<": ["<=", ">="], "<=": ["<", ">"], ">": [">=", "<="], ">=": [">", "<"],
                    "==": ["!="], "!=": ["=="]}


def int_value(text):
    m = INT_RE.match(text)
    if not m:
        return None
    digits, suffix = m.group(1), m.group(2)
    return int(digits, 16 if digits[:2].lower() == "0x" else 10), digits[:2].lower() == "0x", suffix


def format_int(value, hexa, suffix):
    return ("0x%x" % value if hexa else "%d" % value) + suffix


def generate(path, text):
    """Every mutant of one file, in source order."""
    raw = tokenize(text)
    toks = active_tokens(raw)
    active = {t.start for t in toks}
    hidden = [t.start for t in raw if t.start not in active]  # directives and code not compiled
    mutants = []
    for func in find_functions(toks):
        w = Walker(toks, func)
        w.block(func.body_open)
        skip = skipped_tokens(toks, func, w)
        for m in function_mutants(path, text, toks, func, w, skip):
            m.func = func.name
            mutants.append(m)
    # one mutant per id; none that would delete a directive (a statement
    # around an #if CAPSTORE_MUTANT block)
    seen, out = set(), []
    for m in mutants:
        if any(a <= h < b for a, b, _ in m.edits if b > a for h in hidden):
            continue
        if m.id not in seen:
            seen.add(m.id)
            out.append(m)
    out.sort(key=lambda m: (m.line, m.col, m.op, m.index))
    return out


def function_mutants(path, text, toks, func, w, skip):
    out = []
    lo, hi = func.body_open, func.body_close
    for j in range(lo + 1, hi):
        if j in skip:
            continue
        t = toks[j]
        if t.kind == "op" and t.text in COMPARISON:
            for k, alt in enumerate(ROR_ALTERNATIVES[t.text]):
                out.append(Mutant(path, t, "ror", k, [(t.start, t.end, alt)], "`%s` -> `%s`" % (t.text, alt)))
            if t.text in RELATIONAL:
                a, b = right_extent(toks, j, REL_RHS_STOP, hi)
                single_literal = a == b and int_value(toks[a].text) is not None
                if a <= b and not single_literal and not any(x in skip for x in range(a, b + 1)):
                    sign = "-" if t.text in ("<", ">=") else "+"
                    rhs = text[toks[a].start:toks[b].end]
                    out.append(Mutant(path, t, "bound", 0,
                                      [(toks[a].start, toks[a].start, "("), (toks[b].end, toks[b].end, ") %s 1" % sign)],
                                      "`%s %s` -> `%s (%s) %s 1`" % (t.text, short(rhs, 40), t.text, short(rhs, 40), sign)))
        elif t.kind == "num":
            v = int_value(t.text)
            if v is None:
                continue
            value, hexa, suffix = v
            alts = [value + 1] + ([value - 1] if value > 0 else [])
            for k, nv in enumerate(alts):
                rep = format_int(nv, hexa, suffix)
                out.append(Mutant(path, t, "const", k, [(t.start, t.end, rep)], "`%s` -> `%s`" % (t.text, rep)))
        elif t.kind == "op" and t.text in ("&&", "||"):
            out.append(logic_mutant(path, toks, j, lo, hi))
    for (po, pc) in w.conds:
        if any(x in skip for x in range(po, pc + 1)):
            continue
        head = toks[po - 1]
        out.append(Mutant(path, head, "cond", 0,
                          [(toks[po].end, toks[po].end, "!("), (toks[pc].start, toks[pc].start, ")")],
                          "`%s (%s)` negated" % (head.text, short(text[toks[po].end:toks[pc].start], 50))))
    for s in w.stmts:
        if s.kind == "expr" and is_effect(toks, s):
            first = toks[s.first]
            code = text[first.start:toks[s.last].end]
            out.append(Mutant(path, first, "drop", 0, [(first.start, toks[s.last].end, "{}")],
                              "drop `%s`" % short(code)))
        elif s.kind == "return":
            m = return_mutant(path, text, toks, func, s)
            if m is not None:
                out.append(m)
    return out


def short(code, width=60):
    code = " ".join(code.split())
    return code if len(code) <= width else code[:width - 3] + "..."


def is_effect(toks, s):
    for j in range(s.first, s.last):
        tx = toks[j].text
        if tx in ASSIGN or tx in ("++", "--"):
            return True
        if toks[j].kind == "id" and toks[j + 1].text == "(" and tx not in KEYWORDS:
            return True
    return False


def logic_mutant(path, toks, j, lo, hi):
    t = toks[j]
    new = "||" if t.text == "&&" else "&&"
    if t.text == "&&":
        la, lb = left_extent(toks, j, AND_STOP_LEFT, lo)
        ra, rb = right_extent(toks, j, AND_STOP_RIGHT, hi)
    else:
        la, lb = left_extent(toks, j, OR_STOP_LEFT, lo)
        ra, rb = right_extent(toks, j, OR_STOP_RIGHT, hi)
    # Parentheses keep the swapped operator's operands as they were (and gcc's
    # -Wparentheses quiet): ((L) new (R)) where L or R or the context mixes.
    edits = [(t.start, t.end, new)]
    wrap_l, wrap_r = has_logic(toks, la, lb), has_logic(toks, ra, rb)
    outer = toks[la - 1].text in ("&&", "||") or toks[rb + 1].text in ("&&", "||")
    lpre = ("(" if outer else "") + ("(" if wrap_l else "")
    rpost = (")" if wrap_r else "") + (")" if outer else "")
    if lpre:
        edits.append((toks[la].start, toks[la].start, lpre))
    if wrap_l:
        edits.append((toks[lb].end, toks[lb].end, ")"))
    if wrap_r:
        edits.append((toks[ra].start, toks[ra].start, "("))
    if rpost:
        edits.append((toks[rb].end, toks[rb].end, rpost))
    return Mutant(path, t, "logic", 0, edits, "`%s` -> `%s`" % (t.text, new))


def return_mutant(path, text, toks, func, s):
    first, semi = toks[s.first], toks[s.last]
    ret = [x for x in func.ret_type if x not in ("static", "inline", "const", "extern")]
    if s.first + 1 == s.last:  # return;
        if s.last + 1 == func.body_close:
            return None  # the last statement: removing it changes nothing
        return Mutant(path, first, "ret", 0, [(first.start, semi.end, "{}")], "drop early `return;`")
    e0, e1 = toks[s.first + 1], toks[s.last - 1]
    expr = text[e0.start:e1.end]
    span = (e0.start, e1.end)
    if "*" in ret:
        if expr == "NULL":
            return None
        rep = "NULL"
    elif ret == ["bool"] or ret == ["_Bool"]:
        rep = {"true": "false", "false": "true"}.get(expr, "!(%s)" % expr)
    elif ret and all(x in INT_TYPES for x in ret):
        rep = "1" if expr in ("0", "CS_E_OK") else "0"  # CS_E_OK is 0: `return 0` for it changes nothing
    else:
        return None  # a struct or an enum: no value that surely compiles
    return Mutant(path, first, "ret", 0, [(span[0], span[1], rep)], "`return %s` -> `return %s`" % (short(expr, 40), rep))


def mutant_diff(m, text):
    new = m.apply(text)
    return "".join(difflib.unified_diff(text.splitlines(True), new.splitlines(True),
                                        "a/" + m.path, "b/" + m.path, n=2))


# ---------------------------------------------------------------------------
# Selection


def core_files(root):
    d = os.path.join(root, CORE_DIR)
    return sorted(os.path.join(CORE_DIR, f) for f in os.listdir(d) if f.endswith(".c"))


def git(root, *args):
    return subprocess.run(["git", "-C", root] + list(args), check=True, capture_output=True, text=True).stdout


def changed_since(root, rev):
    """{path: set of lines touched in the working tree} for core .c files changed since rev."""
    names = git(root, "diff", "--name-only", rev, "--", CORE_DIR).split()
    out = {}
    for name in names:
        if not name.endswith(".c") or not os.path.exists(os.path.join(root, name)):
            continue
        lines = set()
        for m in re.finditer(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", git(root, "diff", "-U0", rev, "--", name),
                             re.M):
            start, count = int(m.group(1)), int(m.group(2) if m.group(2) is not None else 1)
            lines.update(range(start, start + count) if count else [start])
        out[name] = lines
    return out


def load_equivalents(root):
    """[(id, function, source line, reason)]: the reviewed equivalent mutants (tools/mutate_equivalent.txt)."""
    eq = []
    path = os.path.join(root, EQUIVALENT_FILE)
    if os.path.exists(path):
        with open(path) as f:
            for n, raw in enumerate(f, 1):
                line = raw.rstrip("\n")
                if not line.strip() or line.startswith("#"):
                    continue
                parts = line.split("\t", 3)
                if len(parts) != 4:
                    raise SystemExit("mutate: %s:%d: expected ID<TAB>FUNCTION<TAB>SOURCE LINE<TAB>REASON"
                                     % (EQUIVALENT_FILE, n))
                eq.append((parts[0], parts[1], parts[2].rstrip(), parts[3]))
    return eq


def anchor_of(lines, m):
    """What an equivalent entry names its mutant by; lines: {path: the file's lines}."""
    return (os.path.basename(m.path), getattr(m, "func", ""), m.col, m.op, m.index, lines[m.path][m.line - 1].rstrip())


def match_equivalents(entries, mutants, texts, notes):
    """{mutant id: reason}. An entry names its mutant by id and by its anchor: the function and the
    source line it mutates (with the column, operator and index). The anchor decides: when the code
    above moves, the entry follows its line; when several lines of the function carry the same anchor,
    the id must name one of them; when the line's text changed (or the function's name), the entry no
    longer applies and is named in the notes."""
    lines = {path: text.split("\n") for path, text in texts.items()}
    by_anchor = {}
    for m in mutants:
        by_anchor.setdefault(anchor_of(lines, m), []).append(m)
    files = {os.path.basename(x.path) for x in mutants}
    out, stale = {}, []
    for eid, func, text, reason in entries:
        f, _line, col, op, index = eid.split(":")
        found = by_anchor.get((f, func, int(col), op, int(index), text), [])
        if len(found) > 1:
            found = [m for m in found if m.id == eid]
        if len(found) == 1:
            out[found[0].id] = reason
        elif f in files:
            stale.append(eid)
    if stale:
        notes.append("equivalent entries whose line changed or is ambiguous (run as ordinary mutants): %s"
                     % ", ".join(stale))
    return out


def select(args, root):
    """(mutants to run, equivalent mutants, notes, {path: original text})."""
    notes = []
    files = core_files(root)
    touched = None
    if args.files:
        want = [f.strip() for f in args.files.split(",") if f.strip()]
        files = [f for f in files if os.path.basename(f) in want or f in want]
        missing = set(want) - {os.path.basename(f) for f in files} - set(files)
        if missing:
            raise SystemExit("mutate: no such core file: %s" % ", ".join(sorted(missing)))
    if args.changed_since:
        touched = changed_since(root, args.changed_since)
        files = [f for f in files if f in touched]
        notes.append("changed since %s: %s" % (args.changed_since, ", ".join(files) or "no core file"))
    texts = {}
    mutants = []
    for f in files:
        with open(os.path.join(root, f)) as fh:
            texts[f] = fh.read()
        mutants.extend(generate(f, texts[f]))
    eq_all = match_equivalents(load_equivalents(root), mutants, texts, notes)
    if touched is not None:
        on_lines = [m for m in mutants if m.line in touched[m.path]]
        enough = args.sample if args.sample else 20
        if len(on_lines) >= enough:
            mutants = on_lines
            notes.append("%d mutants on the touched lines" % len(on_lines))
        else:
            notes.append("%d mutants on the touched lines (< %d): the whole changed files" % (len(on_lines), enough))
    if args.only:
        want = [x for o in args.only for x in o.split(",") if x]
        by_id = {m.id: m for m in mutants}
        unknown = [x for x in want if x not in by_id]
        if unknown:
            raise SystemExit("mutate: unknown mutant id(s): %s" % ", ".join(unknown))
        mutants = [by_id[x] for x in want]
    equivalent = [m for m in mutants if m.id in eq_all]
    mutants = [m for m in mutants if m.id not in eq_all]
    if args.sample and args.sample < len(mutants):
        mutants = random.Random(args.seed).sample(mutants, args.sample)
        notes.append("a sample of %d, seed %s" % (args.sample, args.seed))
    mutants.sort(key=lambda m: (m.path, m.line, m.col, m.op, m.index))
    return mutants, [(m, eq_all[m.id]) for m in equivalent], notes, texts


# ---------------------------------------------------------------------------
# Running


def run_cmd(cmd, cwd, timeout):
    """(returncode or 'timeout', output, seconds); the whole process group is
    killed on a timeout."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         errors="replace", start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out, time.monotonic() - t0
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return "timeout", out, time.monotonic() - t0


def tree_files(root):
    """What a copy needs: tracked files plus untracked, unignored files of the
    source directories."""
    files = set(git(root, "ls-files", "-z").split("\0"))
    files |= set(git(root, "ls-files", "-z", "--others", "--exclude-standard", "--",
                     "src", "include", "sim", "faults", "tests", "tools", "CMakeLists.txt").split("\0"))
    return sorted(f for f in files if f and os.path.isfile(os.path.join(root, f)))


def sync_file(src, dst):
    """Copies src to dst unless the bytes are already there (keeps mtimes, so
    ninja rebuilds only what changed)."""
    with open(src, "rb") as f:
        data = f.read()
    try:
        with open(dst, "rb") as f:
            if f.read() == data:
                return
    except FileNotFoundError:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(dst, "wb") as f:
        f.write(data)
    shutil.copymode(src, dst)


def write_text(path, text):
    with open(path, "w") as f:
        f.write(text)


# An index past an array's bound traps (SIGILL, a kill) rather than reading or writing a neighbour: a mutant that
# loops one dimension too far over an 8-dimension array is a defect whether or not the stray write shows. No
# runtime library, no measurable cost (the CI's ASan+UBSan build checks the unmutated code the same way).
MUTANT_CFLAGS = "-fsanitize=bounds -fsanitize-undefined-trap-on-error"


class Worker:
    def __init__(self, root, work, index, texts, args):
        self.root, self.args, self.texts = root, args, texts
        self.dir = os.path.join(work, "j%d" % index)
        self.src = os.path.join(self.dir, "src-tree")
        self.build = os.path.join(self.dir, "build")
        self.dirty = set()

    def prepare(self, files):
        for f in files:
            sync_file(os.path.join(self.root, f), os.path.join(self.src, f))
        # Configured every time (cheap when nothing changed), so a tree made before a flag changed gets it.
        rc, out, _ = run_cmd(["cmake", "-S", self.src, "-B", self.build, "-G", "Ninja",
                              "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DCAPSTORE_MUTANTS=OFF",
                              "-DCMAKE_C_FLAGS=" + MUTANT_CFLAGS], self.dir, 600)
        if rc != 0:
            raise RuntimeError("configure failed in %s:\n%s" % (self.build, out[-3000:]))
        rc, out, _ = run_cmd(["ninja", "-C", self.build, "capstore-sim"], self.dir, 1200)
        if rc != 0:
            raise RuntimeError("the unmutated tree does not build in %s:\n%s" % (self.build, out[-3000:]))

    def restore(self):
        for f in sorted(self.dirty):
            write_text(os.path.join(self.src, f), self.texts[f])
        self.dirty.clear()

    def sim(self, *argv):
        return run_cmd([os.path.join(self.build, "capstore-sim")] + list(argv), self.src, self.args.timeout)

    def baseline(self):
        """The unmutated simulator must pass what the mutants are judged by."""
        rc, out, secs = self.sim("--seeds", str(self.args.seeds), "--quiet", "--stop-on-failure")
        if rc != 0:
            return "the unmutated cores fail the seeds (exit %s):\n%s" % (rc, out[-2000:])
        for p in plan_files(self.src):
            rc, out, _ = self.sim("--plan", p)
            if rc != 0:
                return "the unmutated cores fail %s (exit %s):\n%s" % (p, rc, out[-2000:])
        if not self.args.no_unit:
            failed = self.unit_tests()
            if failed is not None:
                return "the unmutated cores fail the unit test %s:\n%s" % failed
        return None

    def unit_tests(self):
        """None when every core unit test passes; else (name, the end of its output)."""
        names = [t for t in CORE_UNIT_TESTS if os.path.exists(os.path.join(self.src, "tests", t + ".c"))]
        rc, out, _ = run_cmd(["ninja", "-C", self.build] + names, self.dir, 1200)
        if rc != 0:
            return ("(build)", out[-1000:])
        for t in names:
            rc, out, _ = run_cmd([os.path.join(self.build, "tests", t)], os.path.join(self.build, "tests"),
                                 self.args.timeout)
            if rc != 0:
                return (t, out[-1000:])
        return None

    def run(self, m):
        r = {"id": m.id, "file": m.path, "line": m.line, "col": m.col, "op": m.op, "desc": m.desc}
        for f in list(self.dirty):
            if f != m.path:
                write_text(os.path.join(self.src, f), self.texts[f])
                self.dirty.discard(f)
        write_text(os.path.join(self.src, m.path), m.apply(self.texts[m.path]))
        self.dirty.add(m.path)
        rc, out, secs = run_cmd(["ninja", "-C", self.build, "capstore-sim"], self.dir, 600)
        r["compile_s"] = round(secs, 2)
        if rc != 0:
            errs = [x for x in out.splitlines() if "error:" in x]
            r["status"] = "stillborn"
            r["detail"] = re.sub(r"^.*?src/core/", "", errs[0]) if errs else "build failed (%s)" % rc
            r["kind"] = "warning" if errs and all("[-Werror" in x for x in errs) else "error"
            return r
        return self.judge(r)

    def judge(self, r):
        rc, out, secs = self.sim("--seeds", str(self.args.seeds), "--quiet", "--stop-on-failure")
        r["seeds_s"] = round(secs, 2)
        if self.verdict(r, rc, out, "seeds"):
            return r
        r["plans_s"] = 0.0
        for p in plan_files(self.src):
            rc, out, secs = self.sim("--plan", p)
            r["plans_s"] = round(r["plans_s"] + secs, 2)
            if self.verdict(r, rc, out, "plan " + os.path.basename(p)):
                return r
        r["status"] = "model_bound" if r.get("model_bound") else "survived"
        if r["status"] == "survived" and not self.args.no_unit:
            t0 = time.monotonic()
            failed = self.unit_tests()
            r["unit_s"] = round(time.monotonic() - t0, 2)
            if failed is not None and failed[0] != "(build)":
                lines = [x for x in failed[1].splitlines() if x.strip()]
                r.update(status="unit_killed", by=failed[0], detail=" / ".join(lines[-3:])[-300:])
            elif failed is not None:
                r["unit_detail"] = "the unit tests did not build: " + failed[1][-300:]
        return r

    def verdict(self, r, rc, out, where):
        """True when this run decided the mutant's fate."""
        fail = re.search(r"^FAIL .*$", out, re.M)
        first = re.search(r"^first failure at seed (\d+) after (\d+) seeds$", out, re.M)
        if rc == "timeout":
            r.update(status="killed", kind="timeout", by=where, detail="ran past %d s" % self.args.timeout)
            return True
        if isinstance(rc, int) and rc < 0:
            r.update(status="killed", kind="signal %d" % -rc, by=where, detail=out.strip()[-200:])
            return True
        if rc in (3, 4, 5, 6):
            kind = {3: "crash", 4: "safety", 5: "liveness", 6: "plan"}[rc]
            r.update(status="killed", kind=kind, by=where, detail=fail.group(0)[:300] if fail else "")
            if first:
                r["seeds_to_kill"] = int(first.group(2))
            return True
        if rc == 7:
            r["model_bound"] = (where, fail.group(0)[:300] if fail else "")
            if where == "seeds":
                return self.model_bound_seeds(r)
            return False
        if rc == 2 and not self.args.no_baseline:
            # The unmutated simulator took these very arguments and plans (the
            # baseline), so the mutant broke a parse the simulator shares with
            # the cores (faults/plan.c reads numbers with cs_decimal_u64): valid
            # input is refused, which a user would see.
            r.update(status="killed", kind="refused input", by=where, detail=out.strip()[-200:])
            return True
        if rc == 2:
            raise RuntimeError("capstore-sim refused its arguments (%s):\n%s" % (where, out[-1000:]))
        if rc != 0:
            r.update(status="killed", kind="exit %s" % rc, by=where, detail=out.strip()[-200:])
            return True
        return False

    def model_bound_seeds(self, r):
        """A table bound stopped the seeds: run them all and look for a real failure."""
        rc, out, secs = self.sim("--seeds", str(self.args.seeds), "--quiet")
        r["seeds_s"] = round(r["seeds_s"] + secs, 2)
        if rc == "timeout" or (isinstance(rc, int) and rc < 0):
            return self.verdict(r, rc, out, "seeds")
        for m in re.finditer(r"^FAIL seed=\d+ kind=(crash|safety|liveness|plan) .*$", out, re.M):
            r.update(status="killed", kind=m.group(1), by="seeds", detail=m.group(0)[:300])
            return True
        return False


def plan_files(tree):
    d = os.path.join(tree, "faults", "plans")
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".plan"))


def default_work(root):
    tag = hashlib.sha1(root.encode()).hexdigest()[:10]
    return os.path.join("/tmp", "capstore-mutate-%d" % os.getuid(), tag)


def run_all(args, root, mutants, texts):
    work = args.work or default_work(root)
    os.makedirs(work, exist_ok=True)
    lock = open(os.path.join(work, "lock"), "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        log(args, "waiting for another run on %s" % work)
        fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        return run_locked(args, root, mutants, texts, work)
    finally:
        lock.close()


def run_locked(args, root, mutants, texts, work):
    results, queue = resume_split(args, mutants, texts)
    if not queue:
        return results
    files = tree_files(root)
    jobs = max(1, min(args.jobs, len(queue)))
    workers = [Worker(root, work, i, texts, args) for i in range(jobs)]
    for w in workers:
        log(args, "preparing %s" % w.dir)
        w.prepare(files)
    if not args.no_baseline:
        log(args, "baseline: the unmutated cores against %d seeds and the plans" % args.seeds)
        why = workers[0].baseline()
        if why:
            raise RuntimeError(why)
    commit = head_commit(root)
    journal = open_journal(args)
    lock = threading.Lock()
    done = [len(results)]

    def loop(w):
        while True:
            with lock:
                if not queue:
                    break
                m = queue.pop(0)
            r = w.run(m)
            r["src_sha"] = src_sha(texts[m.path])
            r["judged_at"] = commit
            r["judged_under"] = judged_under(args)
            with lock:
                results.append(r)
                if journal is not None:
                    journal.write(json.dumps(r, separators=(",", ":")) + "\n")
                    journal.flush()
                done[0] += 1
                log(args, "[%d/%d] %s %s%s" % (done[0], len(mutants), r["id"], r["status"],
                                               " (%s)" % r["kind"] if r.get("kind") else ""))
        w.restore()

    try:
        with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
            for f in [ex.submit(loop, w) for w in workers]:
                f.result()
    finally:
        for w in workers:
            w.restore()
        if journal is not None:
            journal.close()
    order = {m.id: i for i, m in enumerate(mutants)}
    results.sort(key=lambda r: order[r["id"]])
    return results


def src_sha(text):
    """The mutated file's original text, hashed: a verdict holds for its mutant id only on the same source."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def journal_path(args):
    return os.path.join(args.out, "journal.jsonl")


def open_journal(args):
    """With --resume, every verdict is appended as it is reached, so a run cut off goes on where it stopped."""
    if not args.resume:
        return None
    os.makedirs(args.out, exist_ok=True)
    path = journal_path(args)
    f = open(path, "a")
    if f.tell() > 0:  # a run cut off mid-line: start the next verdict on a line of its own
        with open(path, "rb") as g:
            g.seek(-1, os.SEEK_END)
            if g.read(1) != b"\n":
                f.write("\n")
    return f


def judged_under(args):
    """The settings a verdict depends on besides the mutant: reused only under the same ones."""
    return {"seeds": args.seeds, "no_unit": bool(args.no_unit)}


DEFAULT_SEEDS = 2000  # swarm seeds per mutant, and the setting of journal verdicts that did not record theirs

VERDICTS = ("killed", "survived", "unit_killed", "stillborn", "model_bound")


def resume_split(args, mutants, texts):
    """(verdicts reused from the journal, mutants still to run). A verdict is reused only for the same mutant (id
    and description) on the same source text of its file (src_sha), judged with the same seeds and unit-test
    setting; with --rerun-survivors, survivors and timeouts are judged again (the checker may have grown since,
    a timeout may have been a loaded machine). A killed verdict stays sound while the simulator only gains
    checks, so verdicts of earlier simulators are reused on purpose: the report names their commits."""
    if not args.resume or not os.path.exists(journal_path(args)):
        return [], list(mutants)
    seen = {}
    with open(journal_path(args)) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except ValueError:
                r = None
            if not isinstance(r, dict) or r.get("status") not in VERDICTS or not isinstance(r.get("id"), str):
                log(args, "journal line %d is not a verdict (cut off by a stopped run?): ignored" % n)
                continue
            seen[(r["id"], r.get("src_sha"))] = r  # a later verdict replaces an earlier one
    want = judged_under(args)
    reused, queue = [], []
    for m in mutants:
        r = seen.get((m.id, src_sha(texts[m.path])))
        # Verdicts written before the settings were recorded were all judged under the defaults.
        under = r.get("judged_under", {"seeds": DEFAULT_SEEDS, "no_unit": False}) if r else None
        stale = r is None or r.get("desc") != m.desc or under != want
        rejudge = args.rerun_survivors and r is not None and (
            r["status"] in ("survived", "unit_killed", "model_bound") or r.get("kind") == "timeout")
        if stale or rejudge:
            queue.append(m)
        else:
            reused.append(r)
    log(args, "resume: %d verdicts from %s reused, %d mutants to run" % (len(reused), journal_path(args),
                                                                           len(queue)))
    return reused, queue


def log(args, msg):
    if not args.quiet:
        print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# Report


def score_of(killed, survived):
    return round(100.0 * killed / (killed + survived), 1) if killed + survived else None


COUNTS = ("mutants", "stillborn", "killed", "timeout", "survived", "unit_killed", "model_bound", "equivalent")


def summarize(results, equivalent, files):
    per = {f: dict.fromkeys(COUNTS, 0) for f in files}
    for r in results:
        p = per[r["file"]]
        p["mutants"] += 1
        p[r["status"]] += 1
        if r["status"] == "killed" and r.get("kind") == "timeout":
            p["timeout"] += 1
    for m, _ in equivalent:
        per[m.path]["equivalent"] += 1
    total = {k: sum(p[k] for p in per.values()) for k in COUNTS}
    for p in list(per.values()) + [total]:
        # The simulator's score: a mutant only the unit tests catch survived the simulator.
        p["score"] = score_of(p.get("killed", 0), p.get("survived", 0) + p.get("unit_killed", 0))
        p["score_with_unit"] = score_of(p.get("killed", 0) + p.get("unit_killed", 0), p.get("survived", 0))
    return per, total


def write_reports(args, root, results, equivalent, notes, texts, wall_s, by_id):
    files = sorted({r["file"] for r in results} | {m.path for m, _ in equivalent})
    per, total = summarize(results, equivalent, files)
    for r in results:
        if r["status"] in ("survived", "unit_killed", "model_bound"):
            r["diff"] = mutant_diff(by_id[r["id"]], texts[r["file"]])
    timing = {}
    for key in ("compile_s", "seeds_s", "plans_s"):
        vals = [r[key] for r in results if key in r]
        timing[key] = {"count": len(vals), "mean": round(sum(vals) / len(vals), 2) if vals else None,
                       "max": max(vals) if vals else None, "total": round(sum(vals), 1)}
    surv_times = [r.get("compile_s", 0) + r.get("seeds_s", 0) + r.get("plans_s", 0)
                  for r in results if r["status"] == "survived"]
    kill_times = [r.get("compile_s", 0) + r.get("seeds_s", 0) + r.get("plans_s", 0)
                  for r in results if r["status"] == "killed"]
    timing["survivor_mean_s"] = round(sum(surv_times) / len(surv_times), 2) if surv_times else None
    timing["killed_mean_s"] = round(sum(kill_times) / len(kill_times), 2) if kill_times else None
    report = {
        "tool": "tools/mutate.py",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": head_commit(root),
        "seeds": args.seeds, "timeout_s": args.timeout, "jobs": args.jobs,
        "notes": notes, "wall_s": round(wall_s, 1),
        "judged_at": sorted({r["judged_at"] for r in results if r.get("judged_at")}),
        "total": total, "files": per, "timing": timing,
        "equivalent": [{"id": m.id, "reason": why, "desc": m.desc} for m, why in equivalent],
        "mutants": results,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "mutation.json"), "w") as f:
        json.dump(report, f, indent=1)
    with open(os.path.join(args.out, "mutation.md"), "w") as f:
        f.write(markdown(report))
    return report


def head_commit(root):
    try:
        return git(root, "rev-parse", "HEAD").strip()
    except Exception:
        return None


def markdown(rep):
    L = []
    t = rep["total"]
    L.append("# Mutation testing of src/core\n")
    L.append("Commit %s, %s; %d seeds and every plan per mutant; %d job(s); wall time %.0f s (%.1f min).\n"
             % ((rep["commit"] or "?")[:12], rep["date"], rep["seeds"], rep["jobs"], rep["wall_s"],
                rep["wall_s"] / 60))
    for n in rep["notes"]:
        L.append("- %s" % n)
    if len(rep.get("judged_at", [])) > 1:
        L.append("- verdicts judged by the simulators of %d commits (a run resumed: `--resume`): %s"
                 % (len(rep["judged_at"]), ", ".join(c[:12] for c in rep["judged_at"])))
    L.append("\nScore = killed / (killed + survived + unit_killed): the simulator's; with the unit tests = "
             "(killed + unit_killed) / the same. Stillborn, equivalent and table-bound mutants are not counted; "
             "timeouts count as killed.\n")
    L.append("| file | mutants | stillborn | killed | (timeout) | survived | unit_killed | table bound | equivalent "
             "| score | with unit tests |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    pct = lambda v: "-" if v is None else "%.1f%%" % v
    for name, p in list(rep["files"].items()) + [("**total**", t)]:
        L.append("| %s | %d | %d | %d | %d | %d | %d | %d | %d | %s | %s |" % (
            os.path.basename(name), p["mutants"], p["stillborn"], p["killed"], p["timeout"], p["survived"],
            p["unit_killed"], p["model_bound"], p["equivalent"], pct(p["score"]), pct(p["score_with_unit"])))
    tm = rep["timing"]
    L.append("\nTime per mutant (means): compile %s s, seeds %s s, plans %s s (where run); a survivor %s s, "
             "a killed mutant %s s.\n" % (tm["compile_s"]["mean"], tm["seeds_s"]["mean"], tm["plans_s"]["mean"],
                                          tm["survivor_mean_s"], tm["killed_mean_s"]))
    surv = [r for r in rep["mutants"] if r["status"] == "survived"]
    L.append("## Survivors (%d)\n" % len(surv))
    for r in surv:
        L.append("### %s\n\n%s\n\n```diff\n%s```\n" % (r["id"], r["desc"], r["diff"]))
    unit = [r for r in rep["mutants"] if r["status"] == "unit_killed"]
    L.append("## Survived the simulator, killed by a unit test (%d)\n" % len(unit))
    for r in unit:
        L.append("### %s (%s)\n\n%s\n\n```diff\n%s```\n" % (r["id"], r["by"], r["desc"], r["diff"]))
    for title, sel in (("Table bound (not findings)", lambda r: r["status"] == "model_bound"),
                       ("Timeouts (killed)", lambda r: r.get("kind") == "timeout"),
                       ("Stillborn", lambda r: r["status"] == "stillborn")):
        rows = [r for r in rep["mutants"] if sel(r)]
        L.append("## %s (%d)\n" % (title, len(rows)))
        for r in rows:
            L.append("- `%s` %s: %s" % (r["id"], r["desc"], r.get("detail") or r.get("model_bound", "")))
        L.append("")
    L.append("## Equivalent (%d)\n" % len(rep["equivalent"]))
    for e in rep["equivalent"]:
        L.append("- `%s` %s: %s" % (e["id"], e["desc"], e["reason"]))
    L.append("")
    return "\n".join(L)


# ---------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", action="store_true", help="print the selected mutants' ids and stop")
    ap.add_argument("--diff", action="store_true", help="with --list: print each mutant's diff too")
    ap.add_argument("--only", action="append", default=[], metavar="ID", help="run only this mutant (repeatable; "
                    "comma-separated ids too)")
    ap.add_argument("--files", help="core files to mutate, comma-separated (default: every src/core/*.c)")
    ap.add_argument("--changed-since", metavar="REV", help="only core files changed since REV (git diff REV), "
                    "and only mutants on the touched lines when there are enough of them")
    ap.add_argument("--sample", type=int, default=0, metavar="K", help="a random sample of K mutants")
    ap.add_argument("--seed", default="0", help="the sample's seed (any string; CI passes the commit)")
    ap.add_argument("--seeds", type=int, default=DEFAULT_SEEDS, metavar="N",
                    help="swarm seeds per mutant (%d)" % DEFAULT_SEEDS)
    ap.add_argument("-j", "--jobs", type=int, default=2, help="parallel jobs, one tree copy each (2)")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per simulator run before it counts as "
                    "a hang (120)")
    ap.add_argument("--out", default=os.path.join(ROOT, "mutation-report"), help="report directory")
    ap.add_argument("--work", help="where the tree copies live (default /tmp/capstore-mutate-UID/...)")
    ap.add_argument("--fail-under", type=float, default=None, metavar="SCORE",
                    help="exit 1 when the score (percent) is below SCORE")
    ap.add_argument("--no-baseline", action="store_true", help="skip the unmutated run that guards the verdicts")
    ap.add_argument("--no-unit", action="store_true", help="do not run the cores' unit tests on a simulator survivor")
    ap.add_argument("--resume", action="store_true", help="keep a journal of verdicts in OUT/journal.jsonl and "
                    "reuse those of mutants whose file is unchanged: a long run goes on where it stopped")
    ap.add_argument("--no-run", action="store_true", help="with --resume: run nothing, report the journal's "
                    "verdicts for the selected mutants and how many are not judged yet")
    ap.add_argument("--rerun-survivors", action="store_true", help="with --resume: judge the journal's survivors "
                    "again")
    ap.add_argument("--root", default=ROOT, help=argparse.SUPPRESS)
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    args = ap.parse_args(argv)
    if (args.no_run or args.rerun_survivors) and not args.resume:
        ap.error("--no-run and --rerun-survivors go with --resume")
    root = os.path.abspath(args.root)
    t0 = time.monotonic()
    mutants, equivalent, notes, texts = select(args, root)
    if args.list:
        for n in notes:
            print(n, file=sys.stderr)
        for m in mutants:
            print("%s\t%s" % (m.id, m.desc))
            if args.diff:
                print(mutant_diff(m, texts[m.path]))
        for m, why in equivalent:
            print("%s\tequivalent: %s" % (m.id, why))
        print("%d mutants, %d equivalent" % (len(mutants), len(equivalent)), file=sys.stderr)
        return 0
    for n in notes:
        log(args, n)
    log(args, "%d mutants, %d job(s)" % (len(mutants), args.jobs))
    try:
        if args.no_run:
            results, pending = resume_split(args, mutants, texts)
            notes.append("a report of the journal alone (--no-run): %d of %d mutants judged, %d not yet"
                         % (len(results), len(mutants), len(pending)))
            if pending:
                print("mutate: %d of %d mutants not judged yet: the score below is of the judged ones"
                      % (len(pending), len(mutants)))
        else:
            results = run_all(args, root, mutants, texts) if mutants else []
    except RuntimeError as e:
        print("mutate: %s" % e, file=sys.stderr)
        return 2
    by_id = {m.id: m for m in mutants}
    rep = write_reports(args, root, results, equivalent, notes, texts, time.monotonic() - t0, by_id)
    t = rep["total"]
    pct = lambda v: "-" if v is None else "%.1f%%" % v
    print("mutation score %s (%s with the unit tests): %d killed (%d timeouts), %d survived, %d killed by unit "
          "tests only, %d stillborn, %d table bound, %d equivalent; %.0f s; report in %s"
          % (pct(t.get("score")), pct(t.get("score_with_unit")), t.get("killed", 0), t.get("timeout", 0),
             t.get("survived", 0), t.get("unit_killed", 0), t.get("stillborn", 0), t.get("model_bound", 0),
             t.get("equivalent", 0), rep["wall_s"], args.out))
    for r in results:
        if r["status"] == "survived":
            print("survived: %s %s" % (r["id"], r["desc"]))
        if r["status"] == "unit_killed":
            print("survived the simulator, killed by %s: %s %s" % (r["by"], r["id"], r["desc"]))
    if args.fail_under is not None and args.no_run and len(results) < len(mutants):
        print("mutate: --fail-under judges a whole run, and %d mutants are not judged yet"
              % (len(mutants) - len(results)), file=sys.stderr)
        return 1
    if args.fail_under is not None and t.get("score") is not None and t["score"] < args.fail_under:
        print("mutate: score %.1f%% is under %.1f%%" % (t["score"], args.fail_under), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
