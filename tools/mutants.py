"""The mutants of a C file for tools/mutate.py: small bugs of the kinds people write (a
comparison flipped or moved by one, && and || swapped, + and - swapped, ++ and --, a constant
off by one, true and false, an if or while condition negated, a statement dropped), found on
the file's tokens, so that comments, strings and preprocessor lines are never touched.
Not the runner (tools/mutate.py): this builds and runs nothing."""
import re

PUNCT = sorted(""">>= <<= ... -> ++ -- << >> <= >= == != && || += -= *= /= %= &= |= ^= ##
{ } [ ] ( ) ; : , . ? ! ~ + - * / % < > = & | ^ #""".split(), key=len, reverse=True)
TOKEN_RE = re.compile(
    r"(?P<ws>\s+)|(?P<comment>/\*.*?\*/|//[^\n]*)|(?P<str>\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*')"
    r"|(?P<num>\.?[0-9](?:[eEpP][+-]|[0-9a-zA-Z_.])*)|(?P<id>[A-Za-z_][A-Za-z_0-9]*)|(?P<punct>"
    + "|".join(re.escape(p) for p in PUNCT) + r")", re.S)

TYPE_WORDS = {"int", "char", "void", "float", "double", "long", "short", "unsigned", "signed",
              "bool", "const", "static", "struct", "union", "enum", "volatile", "extern", "typedef",
              "register", "inline", "restrict", "FILE"}
NOT_DROPPED = {"if", "for", "while", "do", "switch", "else", "case", "default", "return", "goto",
               "sizeof"} | TYPE_WORDS


class Tok:
    __slots__ = ("kind", "text", "start", "end", "depth")

    def __init__(self, kind, text, start, end, depth):
        self.kind, self.text, self.start, self.end, self.depth = kind, text, start, end, depth


def tokenize(src):
    """The code tokens of src (no comments, strings or preprocessor lines), each with its
    paren depth."""
    toks, pos, depth, line_start = [], 0, 0, True
    while pos < len(src):
        if line_start and re.match(r"[ \t]*#", src[pos:pos + 200]):
            while True:  # a preprocessor line, with its continuations
                nl = src.find("\n", pos)
                if nl < 0:
                    return toks
                pos = nl + 1
                if src[nl - 1] != "\\":
                    break
            continue
        m = TOKEN_RE.match(src, pos)
        if not m:
            pos += 1
            line_start = False
            continue
        kind, text = m.lastgroup, m.group()
        pos = m.end()
        if kind == "ws":
            line_start = line_start or "\n" in text
            continue
        if kind == "comment":
            continue
        line_start = False
        if kind == "str":
            continue
        if text in ("(", "["):
            depth += 1
        toks.append(Tok(kind, text, m.start(), m.end(), depth))
        if text in (")", "]"):
            depth -= 1
    return toks


ROR = {"<": ["<=", ">="], "<=": ["<", ">"], ">": [">=", "<="], ">=": [">", "<"],
       "==": ["!="], "!=": ["=="]}
OPERAND_END = {"id", "num"}


def int_value(text):
    m = re.fullmatch(r"(0[xX][0-9a-fA-F]+|[0-9]+)([uUlL]*)", text)
    if not m:
        return None, None
    v = int(m.group(1), 0) if not re.fullmatch(r"0[0-7]+", m.group(1)) else int(m.group(1), 8)
    return v, m.group(2)


def make_mutants(src):
    """Every mutant of src: (start, end, replacement, operator)."""
    toks = tokenize(src)
    out = []
    for i, t in enumerate(toks):
        prev = toks[i - 1] if i else None
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        binary = prev is not None and (prev.kind in OPERAND_END or prev.text in (")", "]"))
        if t.text in ROR:
            for r in ROR[t.text]:
                out.append((t.start, t.end, r, "compare"))
        elif t.text in ("&&", "||"):
            out.append((t.start, t.end, "||" if t.text == "&&" else "&&", "logic"))
        elif t.text in ("+", "-") and binary:
            out.append((t.start, t.end, "-" if t.text == "+" else "+", "arith"))
        elif t.text in ("+=", "-="):
            out.append((t.start, t.end, "-=" if t.text == "+=" else "+=", "arith"))
        elif t.text in ("++", "--"):
            out.append((t.start, t.end, "--" if t.text == "++" else "++", "arith"))
        elif t.text in ("*", "/") and is_product(toks, i):
            out.append((t.start, t.end, "/" if t.text == "*" else "*", "arith"))
        elif t.kind == "num":
            v, suffix = int_value(t.text)
            if v is not None:
                if prev is not None and prev.text == "[" and nxt is not None and nxt.text == "]" \
                        and i >= 2 and toks[i - 2].kind == "id" and i >= 3 and toks[i - 3].kind == "id":
                    continue  # an array's size in its declaration
                for nv in ([v + 1, v - 1] if v > 0 else [1]):
                    text = ("0x%x" % nv) if t.text[:2] in ("0x", "0X") else str(nv)
                    out.append((t.start, t.end, text + suffix, "constant"))
        elif t.text in ("true", "false"):
            out.append((t.start, t.end, "false" if t.text == "true" else "true", "constant"))
        if t.text in ("if", "while") and nxt is not None and nxt.text == "(":
            close = matching(toks, i + 1)
            if close is not None:
                s, e = toks[i + 2].start, toks[close].start
                out.append((s, e, "!(" + src[s:e] + ")", "negate"))
        if t.depth == 0 and (prev is None or prev.text in (";", "{", "}") or
                             (prev.text == ")" and opens_header(toks, i - 1))):
            end = statement_end(toks, i)
            if end is not None and droppable(toks, i):
                out.append((t.start, toks[end].end, ";", "drop"))
    return out


def is_product(toks, i):
    """Whether the * or / at toks[i] multiplies or divides (not `T *p`, `(char *)`, `*p`)."""
    prev = toks[i - 1] if i else None
    nxt = toks[i + 1] if i + 1 < len(toks) else None
    if prev is None or nxt is None or nxt.text in (")", ",", ";"):
        return False
    if prev.kind == "num" or prev.text in (")", "]"):
        return True
    before = toks[i - 2].text if i >= 2 else ";"
    return (prev.kind == "id" and prev.text not in NOT_DROPPED and not re.fullmatch(r"\w+_t", prev.text)
            and before not in ("struct", "union", "enum", "{", "}", ";", ","))


def matching(toks, i):
    d = 0
    for j in range(i, len(toks)):
        if toks[j].text == "(":
            d += 1
        elif toks[j].text == ")":
            d -= 1
            if d == 0:
                return j
    return None


def opens_header(toks, close):
    """Whether the ')' at toks[close] ends an if/for/while header."""
    d = 0
    for j in range(close, -1, -1):
        if toks[j].text == ")":
            d += 1
        elif toks[j].text == "(":
            d -= 1
            if d == 0:
                return j > 0 and toks[j - 1].text in ("if", "for", "while")
    return False


def statement_end(toks, i):
    """The index of the ';' that ends the simple statement starting at toks[i], or None."""
    d0 = toks[i].depth
    for j in range(i, min(len(toks), i + 400)):
        t = toks[j]
        if t.text in ("{", "}") and t.depth == d0:
            return None
        if t.text == ";" and t.depth == d0:
            return j
    return None


def droppable(toks, i):
    """Not a declaration, a return or a compound statement's head."""
    t = toks[i]
    if t.kind != "id" and t.text not in ("*", "(", "++", "--"):
        return False
    if t.text in NOT_DROPPED or re.fullmatch(r"\w+_t", t.text):
        return False
    nxt = toks[i + 1] if i + 1 < len(toks) else None
    if nxt is not None and nxt.kind == "id":  # `type name`
        return False
    if nxt is not None and nxt.text == ":":  # a label
        return False
    return True


def line_col(src, off):
    line = src.count("\n", 0, off) + 1
    return line, off - (src.rfind("\n", 0, off) + 1) + 1


class Mutant:
    def __init__(self, path, src, start, end, repl, op):
        self.path, self.start, self.end, self.repl, self.op = path, start, end, repl, op
        self.line, self.col = line_col(src, start)
        self.old = src[start:end]
        ls = src.rfind("\n", 0, start) + 1
        le = src.find("\n", start)
        self.line_text = src[ls:le if le >= 0 else len(src)]
        self.new_line = (src[ls:start] + repl + src[end:le if le >= 0 else len(src)]).split("\n")[0]
        self.id = "%s:%d:%d:%s:%s->%s" % (path, self.line, self.col, op, short(self.old), short(repl))

    def apply(self, src):
        return src[:self.start] + self.repl + src[self.end:]

    def describe(self):
        return "%s:%d: %s: %s -> %s" % (self.path, self.line, self.op, short(self.old), short(self.repl))

    def equivalent_key(self):
        return (self.path, self.line_text.strip(), short(self.old), short(self.repl))

    def bullet(self):
        """The line docs/testing.md lists it with (its reason after the last colon)."""
        return "- `%s:%d` `%s`: `%s` \u2192 `%s`:" % (self.path, self.line, self.line_text.strip(),
                                                  short(self.old), short(self.repl))


def short(s, n=60):
    s = " ".join(s.split())
    return s if len(s) <= n else s[:n - 3] + "..."
