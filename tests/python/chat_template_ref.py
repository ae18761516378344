#!/usr/bin/env python3
"""Reference chat-template renderings for tests/test_chat_template.cpp.

Renders templates with Python `jinja2` configured exactly as Hugging Face transformers'
`apply_chat_template` configures it (transformers/utils/chat_template_utils.py):
  * ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
    extensions=[jinja2.ext.loopcontrols]) -- keep_trailing_newline stays False;
  * the `tojson` filter replaced by json.dumps(x, ensure_ascii=False, indent=None,
    separators=None, sort_keys=False) (no HTML escaping, unlike Jinja's own);
  * globals raise_exception(msg) (raises TemplateError(msg)), strftime_now(fmt),
    dict, and namespace refusing underscore-prefixed attributes;
  * render(messages=..., tools=None, documents=None, add_generation_prompt=...,
    plus the special tokens such as bos_token / eos_token).
The `{% generation %}` tag that transformers adds is accepted and renders its body.

Commands:
  chat_template_ref.py golden DATA_DIR
      DATA_DIR/templates/*.jinja x DATA_DIR/cases.json -> DATA_DIR/golden.jsonl
  chat_template_ref.py check-golden DATA_DIR
      re-renders every case and compares with the committed golden.jsonl (exit 0 same,
      1 different, 77 when jinja2 is not installed)
  chat_template_ref.py check-hf DATA_DIR
      re-renders every golden case with transformers' own render_jinja_template (when
      transformers is importable) to confirm that the environment above matches it
  chat_template_ref.py extract MODEL.gguf [OUT.jinja]
      writes the GGUF's tokenizer.chat_template (exit 3 when the model has none)
  chat_template_ref.py render TEMPLATE.jinja VARS.json
      ad hoc: prints one rendering
  chat_template_ref.py unicode-tables OUT.cpp
      writes engine/chat/jinja/jinja_unicode_tables.cpp: Python's own str.upper/lower/title case
      mappings, the "cased" property, str.isprintable() (for repr()) from this Python's
      unicodedata, so the C++ string methods agree with the reference

Golden line (JSON, ensure_ascii=True):
  {"template": NAME, "case": NAME, "standard": BOOL, "vars": {...}, "output": STR}
or, when rendering raises, {"...", "error": STR, "error_type": EXCEPTION CLASS NAME}.
"standard" cases have only role/content messages and the standard variables, so the
C++ test also renders them through ChatTemplate::render(messages, ...).

Needs: pip install jinja2 (>= 3.1.6, as transformers requires); gguf for `extract`.
"""
import json
import os
import sys
import unicodedata
from datetime import datetime


# ---------------------------------------------------------------------------------
# The environment transformers builds
# ---------------------------------------------------------------------------------
def hf_environment():
    import jinja2
    import jinja2.ext
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        # transformers' AssistantTracker: {% generation %}...{% endgeneration %} renders
        # its body (it also records offsets, which do not change the text).
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    class TemplateNamespace(jinja2.utils.Namespace):
        # transformers refuses underscore-prefixed namespace attributes (sandbox safety).
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}. "
                    "Please rename the attribute.")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = dict
    env.globals["namespace"] = TemplateNamespace
    return env


def standard_vars(variables):
    """The variables transformers always passes, filled in where a case leaves them out."""
    v = {"tools": None, "documents": None, "add_generation_prompt": False}
    v.update(variables)
    return v


def render(env, source, variables):
    return compiled(env, source).render(**standard_vars(variables))


_compiled = {}


def compiled(env, source):
    # One compilation per template source (as transformers caches them too).
    key = (id(env), source)
    if key not in _compiled:
        _compiled[key] = env.from_string(source)
    return _compiled[key]


# ---------------------------------------------------------------------------------
# golden
# ---------------------------------------------------------------------------------
def read_text(path):
    # newline="" keeps \r\n as written: the template lexer, not Python, normalises it.
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def load_templates(data_dir):
    tdir = os.path.join(data_dir, "templates")
    return {name[:-len(".jinja")]: read_text(os.path.join(tdir, name))
            for name in sorted(os.listdir(tdir)) if name.endswith(".jinja")}


def golden_cases(data_dir, templates):
    """Yields (template, case, standard, vars) in a stable order."""
    with open(os.path.join(data_dir, "cases.json"), encoding="utf-8") as f:
        spec = json.load(f)
    convs = spec["conversations"]
    for t in templates:
        tokens = spec["tokens"].get(t, spec["tokens"]["default"])
        for conv in spec["standard"]:
            for gen in (False, True):
                v = {"messages": convs[conv], "add_generation_prompt": gen, **tokens}
                yield t, f"{conv}/gen={int(gen)}", True, v
        for extra in spec["extra"]:
            if t not in extra["templates"]:
                continue
            for gen in (False, True):
                v = {"messages": convs[extra["conversation"]], "add_generation_prompt": gen,
                     **tokens, **extra.get("vars", {})}
                yield t, f"{extra['name']}/gen={int(gen)}", False, v


def golden_lines(data_dir):
    env = hf_environment()
    templates = load_templates(data_dir)
    lines = []
    for t, case, standard, v in golden_cases(data_dir, templates):
        rec = {"template": t, "case": case, "standard": standard, "vars": standard_vars(v)}
        try:
            rec["output"] = render(env, templates[t], v)
        except Exception as e:  # recorded: the C++ side must fail the same way
            rec["error"] = str(e)
            rec["error_type"] = type(e).__name__
        lines.append(json.dumps(rec, ensure_ascii=True) + "\n")
    return lines, len(templates)


def cmd_golden(data_dir):
    lines, n_templates = golden_lines(data_dir)
    out_path = os.path.join(data_dir, "golden.jsonl")
    with open(out_path, "w", encoding="ascii", newline="\n") as out:
        out.writelines(lines)
    n_err = sum('"error"' in line for line in lines)
    print(f"wrote {out_path}: {len(lines)} cases ({n_err} raise) over {n_templates} templates")


def cmd_check_golden(data_dir):
    try:
        import jinja2  # noqa: F401
    except ImportError:
        print("check-golden: jinja2 is not installed; skipped")
        return 77
    lines, _ = golden_lines(data_dir)
    with open(os.path.join(data_dir, "golden.jsonl"), encoding="ascii", newline="") as f:
        committed = f.readlines()
    if lines == committed:
        print(f"check-golden: {len(lines)} cases match")
        return 0
    for i, (a, b) in enumerate(zip(lines, committed)):
        if a != b:
            print(f"check-golden: line {i + 1} differs:\n  now       {a[:300]}\n  committed {b[:300]}")
            break
    print(f"check-golden: golden.jsonl is stale ({len(lines)} cases now, {len(committed)} committed); "
          "regenerate with: chat_template_ref.py golden DATA_DIR")
    return 1


def cmd_check_hf(data_dir):
    try:
        from transformers.utils.chat_template_utils import render_jinja_template
    except Exception as e:  # transformers is optional
        print(f"check-hf: transformers not importable ({e}); skipped")
        return 0
    env = hf_environment()
    templates = load_templates(data_dir)
    bad = 0
    for t, case, _, v in golden_cases(data_dir, templates):
        v = standard_vars(v)
        mine = theirs = None
        try:
            mine = render(env, templates[t], v)
        except Exception as e:
            mine = ("error", str(e))
        kwargs = {k: x for k, x in v.items() if k not in ("messages", "tools", "documents",
                                                         "add_generation_prompt")}
        try:
            theirs = render_jinja_template([v["messages"]], tools=v["tools"], documents=v["documents"],
                                           chat_template=templates[t],
                                           add_generation_prompt=v["add_generation_prompt"],
                                           **kwargs)[0][0]
        except Exception as e:
            theirs = ("error", str(e))
        if mine != theirs:
            bad += 1
            print(f"MISMATCH {t} {case}:\n  ours   {mine!r}\n  theirs {theirs!r}")
    print(f"check-hf: {bad} mismatches")
    return 1 if bad else 0


# ---------------------------------------------------------------------------------
# extract / render
# ---------------------------------------------------------------------------------
def cmd_extract(model, out=None):
    from gguf import GGUFReader
    r = GGUFReader(model)
    f = r.fields.get("tokenizer.chat_template")
    if f is None:
        print(f"{model}: no tokenizer.chat_template", file=sys.stderr)
        return 3
    text = bytes(f.parts[f.data[0]]).decode("utf-8")
    if out:
        with open(out, "w", encoding="utf-8", newline="") as fo:
            fo.write(text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_render(template, vars_path):
    with open(vars_path, encoding="utf-8") as f:
        v = json.load(f)
    sys.stdout.write(render(hf_environment(), read_text(template), v))
    return 0


# ---------------------------------------------------------------------------------
# unicode-tables
# ---------------------------------------------------------------------------------
def scalar_values():
    return (cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000)


def case_runs(method, skip=lambda cp, m: m == chr(cp)):
    """Single-code-point mappings of str.<method> as runs (first, last, delta, stride):
    every code point first, first+stride, ... last maps to itself + delta, and nothing
    in between maps (the runs never overlap). Multi-code-point results are listed apart."""
    runs, special = [], []
    for cp in scalar_values():
        c = chr(cp)
        m = getattr(c, method)()
        if skip(cp, m):
            continue
        if len(m) != 1:
            special.append((cp, m))
            continue
        d = ord(m) - cp
        if runs:
            first, last, delta, stride = runs[-1]
            step = cp - last
            if delta == d and ((stride == 0 and step in (1, 2)) or step == stride):
                runs[-1] = (first, cp, d, step)
                continue
        runs.append((cp, cp, d, 0))
    return [(f, l, d, s or 1) for f, l, d, s in runs], special


def ranges(pred):
    out = []
    for cp in scalar_values():
        if pred(chr(cp)):
            if out and out[-1][1] == cp - 1:
                out[-1][1] = cp
            else:
                out.append([cp, cp])
    return out


def c_string(s):
    return '"' + "".join("\\x%02x" % b for b in s.encode("utf-8")) + '"'


def emit_rows(lines, items, per_line):
    for i in range(0, len(items), per_line):
        lines.append("    " + " ".join(items[i:i + per_line]))


def cmd_unicode_tables(out):
    upper, upper_sp = case_runs("upper")
    lower, lower_sp = case_runs("lower")
    # Title case only where it differs from upper case (a handful of digraphs and the
    # special cases, some mapping to themselves); the lookup falls back to upper case.
    title, title_sp = case_runs("title", skip=lambda cp, m: m == chr(cp).upper())
    cased = ranges(lambda c: c.islower() or c.isupper() or c.istitle())
    nonprint = ranges(lambda c: not c.isprintable())

    lines = [
        "// GENERATED by tests/python/chat_template_ref.py unicode-tables -- do not edit.",
        f"// Python {sys.version.split()[0]}, Unicode {unicodedata.unidata_version}: the case mappings of",
        "// str.upper/lower/title, the code points for which islower/isupper/istitle holds",
        "// (\"cased\"), and those for which isprintable() is false (escaped by repr()).",
        '#include "engine/chat/jinja/jinja_unicode_tables.hpp"',
        "",
        "namespace tandem::jinja::tables {",
        "",
    ]

    def runs_table(name, runs):
        lines.append(f"static const CaseRun k{name}Runs[] = {{")
        emit_rows(lines, [f"{{0x{f:x}, 0x{l:x}, {d}, {s}}}," for f, l, d, s in runs], 4)
        lines.append("};")

    def special_table(name, sp):
        lines.append(f"static const CaseSpecial k{name}Special[] = {{")
        if not sp:
            lines.append("    {0, \"\"},  // none; never matches a real lookup")
        emit_rows(lines, [f"{{0x{cp:x}, {c_string(m)}}}," for cp, m in sp], 2)
        lines.append("};")

    def range_table(name, rs):
        lines.append(f"static const CodeRange k{name}[] = {{")
        emit_rows(lines, [f"{{0x{a:x}, 0x{b:x}}}," for a, b in rs], 6)
        lines.append("};")

    for name, runs, sp in (("Upper", upper, upper_sp), ("Lower", lower, lower_sp),
                           ("Title", title, title_sp)):
        runs_table(name, runs)
        special_table(name, sp)
        lines.append("")
    range_table("Cased", cased)
    range_table("NonPrintable", nonprint)
    lines.append("")
    for name, sp in (("Upper", upper_sp), ("Lower", lower_sp), ("Title", title_sp)):
        n = len(sp) if sp else 0
        lines.append(f"const CaseTable k{name} = {{k{name}Runs, {{k{name}Special, {n}}}}};")
    lines.append("const std::span<const CodeRange> kCasedRanges = kCased;")
    lines.append("const std::span<const CodeRange> kNonPrintableRanges = kNonPrintable;")
    lines.append("")
    lines.append("}  // namespace tandem::jinja::tables")
    with open(out, "w", encoding="ascii", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {out}: upper {len(upper)}+{len(upper_sp)}, lower {len(lower)}+{len(lower_sp)}, "
          f"title {len(title)}+{len(title_sp)}, cased {len(cased)}, non-printable {len(nonprint)}")
    return 0


def main(argv):
    if len(argv) >= 3 and argv[1] == "golden":
        cmd_golden(argv[2])
        return 0
    if len(argv) >= 3 and argv[1] == "check-golden":
        return cmd_check_golden(argv[2])
    if len(argv) >= 3 and argv[1] == "check-hf":
        return cmd_check_hf(argv[2])
    if len(argv) in (3, 4) and argv[1] == "extract":
        return cmd_extract(*argv[2:])
    if len(argv) == 4 and argv[1] == "render":
        return cmd_render(argv[2], argv[3])
    if len(argv) == 3 and argv[1] == "unicode-tables":
        return cmd_unicode_tables(argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
