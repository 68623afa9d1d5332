#!/usr/bin/python3
"""Reads Doxygen's warning log for include/flare/ (make docs) and fails on
  - a public function, struct, typedef, enum, macro, struct field or enum
    value without its comment (WARN_IF_UNDOCUMENTED; FLARE__* and
    FLARE_*_ENUM macros are internal);
  - any other warning than "is not documented" (a malformed comment);
  - a public function whose comment does not name one of its parameters (read
    from Doxygen's XML, next to the log: docs/api/xml). A parameter counts as
    described when its name appears as a word in the function's comment, which
    for a group of adjacent declarations under one comment is that shared
    comment (DISTRIBUTE_GROUP_DOC). Not required: unnamed parameters, `...`,
    a `ud` beside a callback, and a first parameter that points to an opaque
    handle (RECEIVER below).
Only warnings about
include/flare/ are read: that is all Doxygen is given.
Usage: doxy-check.py WARNINGS_LOG [XML_DIR]"""
import glob
import os
import re
import sys
import xml.etree.ElementTree as ET

FATAL_KINDS = {"function", "compound", "typedef", "enumeration", "macro definition",
               "variable", "enumvalue", "other"}
# Macros that are not API: FLARE__* (the mapping header's internals) and the
# X-macro expanders (FLARE_*_ENUM) that build an enum from its map.
INTERNAL_MACRO = re.compile(r"Member (FLARE__\w+|FLARE_\w+_ENUM)\b")
# Headers whose comments do not name every parameter yet: counted, not failed
# on (none now; a header added here needs its reason in docs/api.md).
PARAMS_PENDING = set()
# A first parameter that is a pointer to one of Flare's opaque handles
# (flare_app_t *app, flare_req_t *req, ...: a type the headers declare but
# never define) is the object the function acts on, which its name already
# says (flare_req_header: the request's header): not required. A pointer to a
# struct the headers define (options, an iterator, a table) must be named.
RECEIVER = re.compile(r"^(?:const\s+)?(flare_\w+_t)\s*\*$")
HEADERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "include", "flare")


def defined_types():
    """The flare_*_t types whose definition is public (`} flare_x_t;`)."""
    out = set()
    for path in glob.glob(os.path.join(HEADERS, "*.h")):
        with open(path, encoding="utf-8") as f:
            out.update(re.findall(r"^\}\s*(flare_\w+_t)\s*;", f.read(), re.M))
    return out


def text_of(el):
    return "" if el is None else "".join(el.itertext())


def undescribed_params(xml_dir):
    """(file:line: message) for each named parameter of a public function in
    include/flare/ that its comment does not mention."""
    out = set()
    public_structs = defined_types()
    for path in sorted(glob.glob(os.path.join(xml_dir, "*.xml"))):
        if os.path.basename(path) == "index.xml":
            continue
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError:
            continue
        for m in root.iter("memberdef"):
            if m.get("kind") != "function":
                continue
            loc = m.find("location")
            if loc is None or not loc.get("file", "").startswith("flare/"):
                continue
            doc = " ".join(text_of(m.find(t)) for t in
                           ("briefdescription", "detaileddescription", "inbodydescription"))
            if not doc.strip():
                continue  # undocumented: the warning log reports it
            words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", doc))
            name = text_of(m.find("name"))
            params = m.findall("param")
            types = [text_of(p.find("type")).strip() for p in params]
            has_cb = any(t.endswith("_fn") or t.endswith("_cb") or "(*" in t for t in types)
            for i, p in enumerate(params):
                pn = text_of(p.find("declname")).strip()
                ty = types[i]
                if not pn or pn == "..." or ty == "...":
                    continue
                rm = RECEIVER.match(ty)
                if i == 0 and rm and rm.group(1) not in public_structs:
                    continue  # the handle the function acts on: its name says so
                if pn in ("ud", "userdata", "user_data") and has_cb:
                    continue  # the callback's own argument
                if pn not in words:
                    out.add("%s:%s: warning: parameter '%s' of %s() is not named in its comment"
                            % ("include/" + loc.get("file"), loc.get("line"), pn, name))
    return sorted(out)


def main():
    with open(sys.argv[1], encoding="utf-8", errors="replace") as f:
        lines = [l.rstrip("\n") for l in f if "include/flare/" in l and "warning:" in l]
    lines = sorted(set(lines))
    fatal, later = [], {}
    for l in lines:
        m = re.search(r"is not documented", l)
        if not m:
            fatal.append(l)
            continue
        k = re.search(r"\((function|variable|macro definition|typedef|enumeration|enumvalue)\)", l)
        kind = k.group(1) if k else "compound" if "Compound" in l else "other"
        if kind == "macro definition" and INTERNAL_MACRO.search(l):
            continue
        if kind in FATAL_KINDS:
            fatal.append(l)
        else:
            later[kind] = later.get(kind, 0) + 1
    xml_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        os.path.dirname(os.path.abspath(sys.argv[1])), "api", "xml")
    if not os.path.isdir(xml_dir):
        fatal.append("doxy-check: no Doxygen XML in %s (GENERATE_XML)" % xml_dir)
    else:
        for l in undescribed_params(xml_dir):
            if os.path.basename(l.split(":", 1)[0]) in PARAMS_PENDING:
                later["parameter (pending header)"] = later.get("parameter (pending header)", 0) + 1
            else:
                fatal.append(l)
    for l in fatal:
        print(l)
    if later:
        print("doxy-check: not checked yet, undocumented: " +
              ", ".join("%d %s" % (n, k) for k, n in sorted(later.items())))
    if fatal:
        print("doxy-check: %d problem(s) in include/flare/: document each public declaration "
              "in a comment right above it (a field: or after it on its line), and name each "
              "parameter of a function in its comment (docs/api.md)" % len(fatal))
        return 1
    print("doxy-check: every public function, type, macro and field in include/flare/ is "
          "documented, "
          "every function's comment names its parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
