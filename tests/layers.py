#!/usr/bin/python3
"""
The layer check: calls and includes go down the layers of fs/README's
table, and no files form a circle.

It reads the sources as text.  A file's edges are:
  - its #include "x.h" lines: an edge to x.h's owner (x.c beside it when
    there is one, else the header itself);
  - every identifier in a .c file's code that names a function or a
    global variable defined, not static, in another file its binary
    links (an identifier after '.' or '->' is a field, one the file
    defines itself is its own, and one of a file not linked with it is
    a namesake).
A header's edges (its includes) count as its owner's.

Calls through a table of functions are edges too, which the names
alone do not show: a call `x.f(...)` or `x->f(...)` where f is a
function-pointer field of a struct (declared in a header the caller
includes, directly or not) goes to every function put in that field
(`.f = fn` in an initializer of that struct, or `x.f = fn`); a call
through a file-scope function pointer (or array of them) goes to every
function given to the function that sets it.  Such an edge is how a
lower layer tells an upper one something (a handler registered at
start-up); within one layer it is a circle in disguise, and fails
unless fs/README lists it ("table A -> B" lines, each to be removed).

It fails, naming the names behind each edge, when
  - a file of fs/, lib/ or cmd/ has no layer in the table;
  - an edge goes to a higher layer (cmd/ may use lib/ and cmd/ only,
    lib/ only lib/);
  - files form a circle, within a layer or across;
  - a line of the table's "Known edges up" list is no longer needed or
    an edge up is not on it; the same for its "circle" lines, each of
    which must name exactly the files of a circle there is, and for its
    "table" lines (calls through a table within a layer);
  - a file of a layer that has an "interface" line includes a header of
    the layers below it named there that the line does not list.
Output is TAP.  Usage: layers.py [SOURCE_ROOT]
"""
import fnmatch
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
ROOT = os.path.abspath(ROOT)
DIRS = ("fs", "lib", "cmd")
KEYWORDS = set("""if else for while do switch case default return sizeof goto break continue
typedef struct union enum static extern const volatile inline register restrict
_Static_assert __attribute__ __typeof__ typeof asm __asm__ _Alignof alignof""".split())


def sources():
    out = []
    for d in DIRS:
        for dp, _, fns in os.walk(os.path.join(ROOT, d)):
            for fn in fns:
                if fn.endswith((".c", ".h")):
                    out.append(os.path.relpath(os.path.join(dp, fn), ROOT))
    return sorted(out)


def strip(text):
    """Code without comments, strings, characters and preprocessor lines;
    and the quoted includes."""
    includes = re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M)
    out, i, n = [], 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#" or (at_line_start and c in " \t" and
                                          text[i:].lstrip(" \t").startswith("#")):
            # a preprocessor line, with its continuations
            while i < n:
                j = text.find("\n", i)
                if j < 0:
                    i = n
                    break
                cont = text[i:j].rstrip().endswith("\\")
                i = j + 1
                if not cont:
                    break
            out.append("\n")
            continue
        at_line_start = False
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            out.append(" ")
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            out.append(" 0 ")
        else:
            out.append(c)
            if c == "\n":
                at_line_start = True
            i += 1
    return "".join(out), includes


TOKEN = re.compile(r"[A-Za-z_]\w*|->|[{}()\[\];=,.]|\S")


def definitions(code):
    """(exported, own): names a file defines at file scope, exported
    meaning not static."""
    toks = TOKEN.findall(code)
    exported, own = set(), set()
    depth, stmt = 0, []
    i = 0
    while i < len(toks):
        t = toks[i]
        if depth == 0:
            if t == "{":
                # a function body when the statement so far ends in (...)
                if stmt and stmt[-1] == ")" or (stmt and stmt[-1] == "__attribute__"):
                    name = function_name(stmt)
                    if name:
                        (own if "static" in stmt else exported).add(name)
                        own.add(name)
                        i = skip_block(toks, i)
                        stmt = []
                        continue
                depth += 1
                stmt.append(t)
            elif t == ";":
                for name in variable_names(stmt):
                    own.add(name)
                    if "static" not in stmt and "extern" not in stmt:
                        exported.add(name)
                stmt = []
            else:
                stmt.append(t)
        else:
            if t == "{":
                depth += 1
            elif t == "}":
                depth -= 1
            stmt.append(t)
        i += 1
    return exported, own


def skip_block(toks, i):
    depth = 0
    while i < len(toks):
        if toks[i] == "{":
            depth += 1
        elif toks[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def function_name(stmt):
    # the identifier before the first '(' at parenthesis depth 0
    for k, t in enumerate(stmt):
        if t == "(":
            if k > 0 and re.match(r"[A-Za-z_]\w*$", stmt[k - 1]) and stmt[k - 1] not in KEYWORDS:
                return stmt[k - 1]
            return None
    return None


def variable_names(stmt):
    if not stmt or "typedef" in stmt or "extern" in stmt:
        return []
    # brace groups (a struct's body, an initializer) count as one token
    flat, depth = [], 0
    for t in stmt:
        if t == "{":
            if depth == 0:
                flat.append("{}")
            depth += 1
        elif t == "}":
            depth -= 1
        elif depth == 0:
            flat.append(t)
    names, seg, paren = [], [], 0
    for t in flat + [","]:
        if t == "(":
            paren += 1
        elif t == ")":
            paren -= 1
        if paren == 0 and t == ",":
            head = []
            for x in seg:
                if x in ("=", "["):
                    break
                head.append(x)
            if "(" in head:
                return []  # a prototype or a function pointer
            ids = [x for x in head if re.match(r"[A-Za-z_]\w*$", x) and x not in KEYWORDS]
            if ids and head and head[-1] == ids[-1] and (names or len(ids) > 1):
                names.append(ids[-1])
            seg = []
        else:
            seg.append(t)
    return names


def uses(code):
    toks = TOKEN.findall(code)
    out = set()
    for k, t in enumerate(toks):
        if re.match(r"[A-Za-z_]\w*$", t) and t not in KEYWORDS:
            if k > 0 and toks[k - 1] in (".", "->"):
                continue
            out.add(t)
    return out


def match_brace(c, i):
    """The index of the '}' closing the '{' at c[i]."""
    depth = 0
    for k in range(i, len(c)):
        if c[k] == "{":
            depth += 1
        elif c[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(c)


def enclosing_struct(c, pos):
    """The struct an initializer's field at pos belongs to: the innermost
    '{' open before pos, with 'struct NAME' (a compound literal, or a
    declaration with '=') right before it; None if not so."""
    depth = 0
    for k in range(pos - 1, -1, -1):
        if c[k] == "}":
            depth += 1
        elif c[k] == "{":
            if depth == 0:
                m = re.search(r"struct\s+(\w+)\s*\)?\s*(?:\w+\s*(?:\[\s*\w*\s*\])?\s*=\s*)?$",
                              c[max(0, k - 200):k])
                return m.group(1) if m else None
            depth -= 1
    return None


def table_edges(files, code, own, reach, links):
    """(caller, implementer) -> names, for calls through tables (see above)."""
    defined = {}
    for f, names in own.items():
        for n in names:
            defined.setdefault(n, set()).add(f)
    fields, home = {}, {}
    for f in files:
        c = code[f]
        for m in re.finditer(r"\bstruct\s+(\w+)\s*\{", c):
            body = c[m.end():match_brace(c, m.end() - 1)]
            fl = set(re.findall(r"\(\s*\*\s*(\w+)\s*\)\s*\(", body))
            if fl:
                fields.setdefault(m.group(1), set()).update(fl)
                home[m.group(1)] = f
    impl = {}  # (struct, field) -> {(file, function)}
    for f in files:
        c = code[f]
        for m in re.finditer(r"(\.|->)\s*(\w+)\s*=\s*&?\s*(\w+)\s*(?=[,;}])", c):
            fld, fn = m.group(2), m.group(3)
            cands = [st for st, fl in fields.items() if fld in fl]
            if not cands or fn not in defined:
                continue
            st = enclosing_struct(c, m.start()) if m.group(1) == "." else None
            if st in fields and fld in fields[st]:
                cands = [st]
            for st in cands:
                for g in defined[fn]:
                    if links(f, g):
                        impl.setdefault((st, fld), set()).add((g, fn))
    out = {}
    for f in files:
        if not f.endswith(".c"):
            continue
        for m in re.finditer(r"(?:\.|->)\s*(\w+)\s*\(", code[f]):
            for (st, fld), fns in impl.items():
                if fld == m.group(1) and home[st] in reach(f):
                    for g, fn in fns:
                        if links(f, g):
                            out.setdefault((f, g), set()).add("%s.%s = %s" % (st, fld, fn))
    # file-scope function pointers: the function that sets one, and who it is given
    for f in files:
        if not f.endswith(".c"):
            continue
        c = code[f]
        bodies, k = [], 0  # (function, start, end) of each function body
        while True:
            k = c.find("{", k)
            if k < 0:
                break
            end = match_brace(c, k)
            fm = re.search(r"(\w+)\s*\((?:[^()]|\([^()]*\))*\)\s*$", c[max(0, k - 300):k])
            if fm:
                bodies.append((fm.group(1), k, end))
            k = end + 1
        ptrs = set()
        for m in re.finditer(r"^[ \t]*(?:static\s+)?[\w\s]*?\(\s*\*\s*(\w+)\s*(?:\[[^]]*\])?\s*\)"
                             r"\s*\([^;{]*\)\s*;", c, re.M):
            ptrs.add(m.group(1))
        for m in re.finditer(r"^[ \t]*(?:static\s+)?(\w+_fn)\s*\*\s*(\w+)\s*(?:\[[^]]*\])?\s*;",
                             c, re.M):
            ptrs.add(m.group(2))
        for ptr in ptrs:
            if not re.search(r"\b%s\s*(?:\[[^]]*\]\s*)?\(" % ptr, c):
                continue  # never called here
            setters = set()
            for m in re.finditer(r"\b%s\s*(?:\[[^]]*\]\s*)?=\s*\w+\s*;" % ptr, c):
                for name, lo, hi in bodies:  # the function around the assignment
                    if lo < m.start() < hi:
                        setters.add(name)
            for g in files:
                if not g.endswith(".c") or not links(f, g):
                    continue
                for st in setters:
                    for m in re.finditer(r"\b%s\s*\(([^;]*?)\)\s*;" % st, code[g]):
                        for arg in re.findall(r"\w+", m.group(1)):
                            for h in defined.get(arg, ()):
                                if h != f and links(f, h):
                                    out.setdefault((f, h), set()).add("%s via %s()" % (arg, st))
    return out


def read_table():
    """fs/README's layer table: 'layer NAME: PATTERN...' lines, top
    first; 'up FILE -> FILE' lines list the known edges up."""
    text = open(os.path.join(ROOT, "fs", "README")).read()
    layers, known_up, known_circles, known_tables = [], set(), set(), set()
    interfaces = []
    for line in text.splitlines():
        m = re.match(r"\s*interface\s+(\w+)\s*->\s*([\w ]+?)\s*:\s*(.*\S)\s*$", line)
        if m:
            interfaces.append((m.group(1), set(m.group(2).split()), set(m.group(3).split())))
        m = re.match(r"\s*table\s+(\S+)\s*->\s*(\S+)\s*$", line)
        if m:
            known_tables.add((m.group(1), m.group(2)))
        m = re.match(r"\s*circle\s+(.*\S)\s*$", line)
        if m:
            known_circles.add(tuple(sorted(m.group(1).split())))
        m = re.match(r"\s*layer\s+(\w+):\s*(.*)$", line)
        if m:
            layers.append((m.group(1), m.group(2).split()))
        m = re.match(r"\s*up\s+(\S+)\s*->\s*(\S+)\s*$", line)
        if m:
            known_up.add((m.group(1), m.group(2)))
    return layers, known_up, known_circles, known_tables, interfaces


def main():
    layers, known_up, known_circles, known_tables, interfaces = read_table()
    files = sources()
    rank, layer_of = {}, {}
    names = [name for name, _ in layers]
    problems = []
    for f in files:
        for r, (name, pats) in enumerate(layers):
            if any(fnmatch.fnmatch(f, p) for p in pats):
                rank[f], layer_of[f] = len(layers) - r, name
                break
        else:
            problems.append("%s has no layer in fs/README" % f)

    def owner(f):
        if f.endswith(".h"):
            c = f[:-2] + ".c"
            if os.path.exists(os.path.join(ROOT, c)):
                return c
        return f

    code, incs, exported, own = {}, {}, {}, {}
    for f in files:
        c, inc = strip(open(os.path.join(ROOT, f), errors="replace").read())
        code[f], incs[f] = c, inc
        if f.endswith(".c"):
            exported[f], own[f] = definitions(c)
    definer = {}
    for f, ex in exported.items():
        for n in ex:
            definer.setdefault(n, set()).add(f)

    edges = {}  # (from, to) -> set of names
    included = {}  # file -> the files of fs/ and lib/ it includes

    def links(f, g):
        """Whether f's binary links g: else a name they share is a namesake."""
        top = lambda x: x.split(os.sep)[0]
        if top(f) == "lib":
            return top(g) == "lib"
        if top(f) == "cmd":
            # each program is a binary of its own; the cmd/ modules are shared
            return top(g) == "lib" or (top(g) == "cmd" and not os.path.basename(g).startswith("hsmfs"))
        return top(g) in ("fs", "lib")

    def add(a, b, why):
        a, b = owner(a), owner(b)
        if a != b:
            edges.setdefault((a, b), set()).add(why)

    for f in files:
        d = os.path.dirname(f)
        for h in incs[f]:
            cand = [os.path.normpath(os.path.join(x, h)) for x in (d, "fs", "lib", "include")]
            target = next((c for c in cand if os.path.exists(os.path.join(ROOT, c))), None)
            if target and not target.startswith("include" + os.sep):
                add(f, target, '#include "%s"' % h)
                included.setdefault(f, set()).add(target)
        if not f.endswith(".c"):
            continue  # a header's prototypes are its owner's interface
        mine = own.get(f, set())
        for n in uses(code[f]):
            if n in mine:
                continue
            for g in definer.get(n, ()):
                if links(f, g):
                    add(f, g, n)

    def reach(f, seen=None):
        """The files f includes, directly or through the headers it includes."""
        seen = set() if seen is None else seen
        d = os.path.dirname(f)
        for h in incs.get(f, ()):
            for x in (d, "fs", "lib"):
                c = os.path.normpath(os.path.join(x, h))
                if c in incs:
                    if c not in seen:
                        seen.add(c)
                        reach(c, seen)
                    break
        seen.add(f)
        return seen

    within = set()
    for (a, b), why in sorted(table_edges(files, code, own, reach, links).items()):
        a, b = owner(a), owner(b)
        if a == b or a not in rank or b not in rank:
            continue
        if rank[b] == rank[a]:
            within.add((a, b))
            if (a, b) not in known_tables:
                problems.append("table: %s -> %s calls through a table within the layer %s: "
                                "%s" % (a, b, layer_of[a], ", ".join(sorted(why)[:6])))
        elif rank[b] < rank[a]:
            add(a, b, "through a table: " + ", ".join(sorted(why)[:3]))
        # above: a handler the upper layer registered (fs/README)
    for a, b in sorted(known_tables - within):
        problems.append("table: 'table %s -> %s' in fs/README is no longer there: remove it"
                        % (a, b))

    ups = set()
    for (a, b), why in sorted(edges.items()):
        if a not in rank or b not in rank:
            continue
        wrong = False
        if a.startswith("cmd/"):
            wrong = not (b.startswith("cmd/") or b.startswith("lib/"))
        elif a.startswith("lib/"):
            wrong = not b.startswith("lib/")
        elif rank[b] > rank[a]:
            wrong = True
        if wrong:
            ups.add((a, b))
            if (a, b) not in known_up:
                problems.append("%s (%s) -> %s (%s) goes up: %s" % (
                    a, layer_of[a], b, layer_of[b], ", ".join(sorted(why)[:8])))
    for a, b in sorted(known_up - ups):
        problems.append("'up %s -> %s' in fs/README is no longer needed: remove it" % (a, b))

    # circles: strongly connected components of more than one file
    graph = {}
    for (a, b) in edges:
        graph.setdefault(a, set()).add(b)
    index, low, stack, on, sccs = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    for comp in sccs:
        if tuple(comp) in known_circles:
            continue
        ties = ["%s -> %s: %s" % (a, b, ", ".join(sorted(edges[(a, b)])[:6]))
                for a in comp for b in comp if (a, b) in edges]
        problems.append("a circle of %d files: %s\n    %s" % (
            len(comp), " ".join(comp), "\n    ".join(ties)))

    for comp in sorted(known_circles - {tuple(c) for c in sccs}):
        problems.append("a circle no longer there as fs/README lists it: %s (remove or "
                        "shrink its 'circle' line)" % " ".join(comp))

    # interfaces: what a layer includes of the layers below it named
    for upper, lower, allowed in interfaces:
        for f in sorted(included):
            if layer_of.get(f) != upper:
                continue
            for t in sorted(included[f]):
                if layer_of.get(t) in lower and t not in allowed:
                    problems.append("interface: %s (%s) includes %s (%s), not its interface "
                                    "(%s)" % (f, upper, t, layer_of[t], " ".join(sorted(allowed))))

    print("1..5")
    layerless = [p for p in problems if "has no layer" in p]
    tables = [p for p in problems if p.startswith("table: ")]
    rest_up = [p for p in problems if "goes up" in p or "no longer needed" in p]
    circles = [p for p in problems if p.startswith("a circle")]
    ifaces = [p for p in problems if p.startswith("interface: ")]
    for comp in sorted(known_circles & {tuple(c) for c in sccs}):
        print("# known circle, to be broken: %s" % " ".join(comp))
    for a, b in sorted(known_tables & within):
        print("# known call through a table within a layer, to be removed: %s -> %s" % (a, b))
    for k, (title, ps) in enumerate((("every file has a layer", layerless),
                                     ("no edge goes up", rest_up),
                                     ("no circle", circles),
                                     ("no call through a table stays in its layer", tables),
                                     ("each layer includes of the ones below only their "
                                      "interface", ifaces)), 1):
        print("%s %d - %s" % ("ok" if not ps else "not ok", k, title))
        for p in ps:
            for line in p.splitlines():
                print("# " + line)
    print("# %d files, %d edges, %d known edges up, layers: %s" % (
        len(files), len(edges), len(known_up), " > ".join(names)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
