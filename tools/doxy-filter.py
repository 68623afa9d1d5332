#!/usr/bin/python3
"""Doxygen's INPUT_FILTER for include/flare/*.h: reads a header in Flare's
comment style and prints it as Doxygen reads it, line for line (so warnings
name the right lines), without changing the header itself.

The style (docs/style.md): a public declaration is documented by the plain
/* ... */ comment right above it (no blank line between), or by one on the
same line after it (struct fields). So:
  - a comment followed directly by code becomes /** ... */ (JAVADOC_AUTOBRIEF
    takes its first sentence as the brief);
  - a comment after code on the same line becomes /**< ... */;
  - a comment above several declarations with no blank line between them
    documents all of them (flare_get, flare_post, ...): they are put in a
    member group, whose first member's comment DISTRIBUTE_GROUP_DOC gives to
    the others;
  - the header's first comment becomes its @file description;
  - a /* clang-format off */ line between a comment and its code is looked
    past;
  - a struct field declaration that names two (size_t a, b;) is a member
    group as well, so that its comment documents both;
  - a comment followed by a blank line (section banners, notes) stays plain,
    so a declaration under it counts as undocumented.
Comments already in Doxygen's syntax (/**, /*!, ///) are left alone."""
import os
import re
import sys

SKIP = re.compile(r"^/\*\s*(clang-format|NOLINT)")


def scan(text):
    """Comments as (start, end) offsets, and the brace depth at each offset
    where a comment starts."""
    comments, depth, i, n = [], 0, 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            comments.append((i, j, depth))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        else:
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            i += 1
    return comments


def line_bounds(text, pos):
    s = text.rfind("\n", 0, pos) + 1
    e = text.find("\n", pos)
    return s, (len(text) if e < 0 else e)


def strip_comments(s, comments, base):
    """s (text[base:base+len(s)]) with the comments blanked."""
    out = list(s)
    for a, b, _ in comments:
        for k in range(max(a, base), min(b, base + len(s))):
            if out[k - base] != "\n":
                out[k - base] = " "
    return "".join(out)


def top_level_comma(code):
    par = 0
    for ch in code:
        if ch == "(":
            par += 1
        elif ch == ")":
            par -= 1
        elif ch == "," and par == 0:
            return True
    return False


def filter_header(text, name):
    comments = scan(text)
    edits = []  # (offset, replace_len, new_text)
    guard = re.search(r"^#\s*(ifndef|define)\b", text, re.M)
    first = True
    for idx, (a, b, depth) in enumerate(comments):
        body = text[a:b]
        if body.startswith("/**") or body.startswith("/*!"):
            first = False
            continue
        if first and guard is not None and a < guard.start():
            edits.append((a, 2, "/** @file %s " % name))
            first = False
            continue
        first = False
        if SKIP.match(body):
            continue
        ls, _ = line_bounds(text, a)
        before = strip_comments(text[ls:a], comments, ls)
        if before.strip():
            edits.append((a, 2, "/**<"))
            if depth > 0 and before.rstrip().endswith(";") and top_level_comma(before):
                # a field declaration naming two (char *a, *b; /* c */):
                # a member group gives the comment to both
                _, le = line_bounds(text, b)
                if le < len(text):
                    edits.append((ls, 0, "/**@{*/ "))
                    edits.append((le + 1, 0, "/**@}*/ "))
            continue
        # leading: the rest of its last line empty, the next line code
        _, le = line_bounds(text, b)
        if text[b:le].strip():
            continue
        nxt_s = le + 1
        if nxt_s >= len(text):
            continue
        _, nxt_e = line_bounds(text, nxt_s)
        nxt = text[nxt_s:nxt_e].strip()
        # a /* clang-format off */ line between a comment and its code
        # (a table kept as written) is looked past
        if SKIP.match(nxt) and nxt.endswith("*/") and nxt_e + 1 < len(text):
            nxt_s = nxt_e + 1
            _, nxt_e = line_bounds(text, nxt_s)
            nxt = text[nxt_s:nxt_e].strip()
        if not nxt or nxt.startswith("}") or nxt.startswith("/*") or nxt.startswith("//"):
            continue
        if nxt.startswith("#") and not re.match(r"#\s*define\b", nxt):
            continue
        if nxt.startswith('extern "C"'):
            continue
        edits.append((a, 2, "/**"))
        # the run of declarations it documents: until a blank line, a comment
        # line, or the end of the enclosing braces
        pos, decls, last_end, d, par = nxt_s, 0, None, depth, 0
        while pos < len(text):
            _, e = line_bounds(text, pos)
            raw = text[pos:e]
            code = strip_comments(raw, comments, pos)
            if not raw.strip() or (not code.strip() and raw.strip()):
                break
            if code.lstrip().startswith("#"):
                if re.match(r"\s*#\s*define\b", code):
                    decls += 1
                    last_end = e
                    while code.rstrip().endswith("\\") and e + 1 < len(text):
                        pos = e + 1
                        _, e = line_bounds(text, pos)
                        code = strip_comments(text[pos:e], comments, pos)
                        last_end = e
                pos = e + 1
                continue
            stop = False
            field = depth > 0 and code.rstrip().endswith(";")
            for ch in code:
                if ch == "(":
                    par += 1
                elif ch == ")":
                    par -= 1
                elif ch == "," and par == 0 and d == depth and field:
                    decls += 1  # a field declaration naming two: size_t a, b;
                elif ch == "{":
                    d += 1
                elif ch == "}":
                    d -= 1
                    if d < depth:
                        stop = True
                        break
                elif ch == ";" and d == depth:
                    decls += 1
                    last_end = e
            if stop:
                break
            pos = e + 1
        if decls >= 2 and last_end is not None and last_end < len(text):
            # closed at the start of the next line: after a #define, the
            # same line would be the macro's body
            edits.append((a, 0, "/**@{*/ "))
            edits.append((last_end + 1, 0, "/**@}*/ "))
    if first or not any(t.startswith("/** @file") for _, _, t in edits):
        if not text.startswith("/**"):
            edits.append((0, 0, "/** @file %s */ " % name))
    # Text that Doxygen would take for its commands or HTML (`\r`, `@host`,
    # `<prefix>`) is escaped in every comment it reads as documentation.
    converted = {off for off, rl, new in edits if rl == 2}
    for a, b, _ in comments:
        if a in converted:
            body = text[a + 2:b - 2]
            esc = re.sub(r"([\\@<>])", r"\\\1", body)
            if esc != body:
                edits.append((a + 2, len(body), esc))
    out, last = [], 0
    for off, rl, new in sorted(edits, key=lambda x: (x[0], x[1])):
        out.append(text[last:off])
        out.append(new)
        last = off + rl
    out.append(text[last:])
    return "".join(out)


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        sys.stdout.write(filter_header(f.read(), os.path.basename(sys.argv[1])))
