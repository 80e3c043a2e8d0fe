#!/usr/bin/env python3
"""Reference renders for tessera_jinja, made with Python's jinja2 configured as transformers
configures it (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True), the
loopcontrols extension, transformers' tojson, raise_exception, strftime_now).

  make_fixtures.py FIXTURES_DIR                   write renders.json and language.json
  make_fixtures.py --check FIXTURES_DIR           exit 1 when the committed files are stale,
                                                  77 (CTest skip) without jinja2
  make_fixtures.py --import CONFIG.json NAME FIXTURES_DIR
                                                  copy a tokenizer_config.json's chat_template
                                                  (and bos/eos tokens) into templates/NAME.*

Templates come from fixtures/templates/*.jinja (with NAME.tokens.json holding bos/eos), the
conversations from fixtures/conversations.json, the language cases from LANGUAGE below.
"""
import json
import os
import sys

try:
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("make_fixtures.py: python3 jinja2 is not installed (apt-get install python3-jinja2); skipping")
    sys.exit(77)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def strftime_now(fmt):
    return "26 Jul 2024"  # fixed so the references are reproducible; C++ tests pass it as a variable


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, variables):
    try:
        return {"output": env.from_string(source).render(**variables)}
    except TemplateError as e:
        return {"error": "raise_exception: " + str(e)}
    except Exception as e:  # a type error in the template: C++ must fail too
        return {"error": type(e).__name__}


# Language cases: (name, template, variables).
LANGUAGE = [
    ("text", "hello world", {}),
    ("print_vars", "{{ a }} {{ b }} {{ c }} {{ d }} {{ e }} {{ f }}", {"a": 1, "b": 2.5, "c": True, "d": None, "e": "s", "f": [1, "x", None, 1.0]}),
    ("print_dict", "{{ d }}", {"d": {"k": "it's", "n": {"x": [True, False]}}}),
    ("undefined_prints_empty", "[{{ nope }}]", {}),
    ("arith", "{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.5 + 1 }} {{ 10 / 4 }}", {}),
    ("float_repr", "{{ 0.1 }} {{ 1e-5 }} {{ 1e16 }} {{ 123456.789 }} {{ 3.0 }} {{ 1/3 }}", {}),
    ("concat", "{{ 'a' ~ 1 ~ none ~ true }} {{ 'x' + 'y' }} {{ [1] + [2, 3] }}", {}),
    ("compare", "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ [1,2] == [1,2] }}", {}),
    ("logic", "{{ true and 'x' }} {{ false or 'y' }} {{ not none }} {{ 0 or '' }} {{ 1 and 0 }}", {}),
    ("in", "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }}", {}),
    ("ternary", "{{ 'yes' if x else 'no' }}|{{ 'a' if false }}|", {"x": 1}),
    ("tests", "{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ none is none }} {{ 's' is string }} {{ 1 is number }} {{ 1 is integer }} {{ 1.0 is float }} {{ {} is mapping }} {{ [] is iterable }} {{ 's' is iterable }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ x is sameas 1 }} {{ true is boolean }} {{ x is eq 1 }} {{ 'abc' is lower }} {{ x is not none }}", {"x": 1}),
    ("if_elif", "{% for i in [1, 2, 3, 4] %}{% if i == 1 %}one{% elif i == 2 %}two{% elif i == 3 %}three{% else %}many{% endif %},{% endfor %}", {}),
    ("loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.cycle('p', 'q') }};{% endfor %}", {}),
    ("loop_prev_next", "{% for x in [1, 2, 3] %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }} {% endfor %}", {}),
    ("loop_else", "{% for x in [] %}x{% else %}empty{% endfor %}", {}),
    ("loop_filter", "{% for x in range(10) if x is odd %}{{ x }}{{ '' if loop.last else ',' }}{% endfor %}", {}),
    ("loop_dict", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}{% for k, v in d|items %}{{ v }}{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("nested_loop", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index }} {% endfor %}", {}),
    ("break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("set_scoping", "{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}", {}),
    ("set_if_scope", "{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}", {}),
    ("namespace", "{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}", {}),
    ("set_tuple_block", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set blk %}in {{ a }} block{% endset %}[{{ blk }}]", {}),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(name='C', punct='.') }}", {}),
    ("slices", "{{ s[1:3] }} {{ s[::-1] }} {{ s[-2:] }} {{ l[::2] }} {{ l[1:] }} {{ l[:-1] }} {{ l[-1] }} {{ s[0] }} {{ l[5] }}|", {"s": "héllo", "l": [1, 2, 3, 4, 5]}),
    ("subscript_attr", "{{ d.a }} {{ d['a'] }} {{ d.b.c }} {{ d['b']['c'] }} {{ l.0 }} {{ d.zz }}|", {"d": {"a": 1, "b": {"c": 2}}, "l": ["first"]}),
    ("literals", "{{ [1, 'a', [2]] }} {{ {'k': 'v', 'n': none} }} {{ (1, 2) }} {{ (1,) }} {{ 'a' 'b' }} {{ \"q'\" }}", {}),
    ("string_escapes", "{{ 'a\\nb\\tc\\\\d\\'e' }}|{{ \"\\u00e9\" }}", {}),
    ("str_methods", "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' x') }}|{{ s.upper() }}|{{ s.lower() }}|{{ t.title() }}|{{ t.capitalize() }}", {"s": "  xHello World x  ", "t": "hello wORLD-foo bar"}),
    ("str_split", "{{ a.split() }} {{ a.split(',') }} {{ a.split(',', 1) }} {{ b.split('</think>')[-1] }} {{ b.rsplit('<', 1) }} {{ 'a  b '.split() }}", {"a": "x,y ,z", "b": "<think>r</think>answer"}),
    ("str_affix", "{{ s.startswith('ab') }} {{ s.endswith('yz') }} {{ s.startswith(('q', 'a')) }} {{ s.replace('b', 'B') }} {{ s.find('c') }} {{ s.count('a') }} {{ '-'.join(['x', 'y']) }}", {"s": "abcabxyz"}),
    ("filters_text", "{{ s|trim }}|{{ s|upper }}|{{ s|lower }}|{{ s|capitalize }}|{{ s|title }}|{{ s|length }}|{{ s|replace('o', '0') }}|{{ s|trim('- ') }}", {"s": " -hello wOrld- "}),
    ("filters_list", "{{ l|length }} {{ l|first }} {{ l|last }} {{ l|join(', ') }} {{ l|reverse|list }} {{ l|sort }} {{ l|unique|list }} {{ l|min }} {{ l|max }} {{ l|sum }} {{ 'ab'|list }}", {"l": [3, 1, 2, 3]}),
    ("filters_default", "{{ x|default('dflt') }} {{ y|default('d2') }} {{ ''|default('e', true) }} {{ none|default('n') }} {{ x|d('z') }}", {"y": "set"}),
    ("filters_convert", "{{ '42'|int }} {{ 3.9|int }} {{ 'x'|int }} {{ '2.5'|float }} {{ 7|string }} {{ -3|abs }} {{ 2.567|round(2) }} {{ 'a<b'|e }} {{ 'x'|safe }}", {}),
    ("filters_select", "{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|join('|') }} {{ msgs|rejectattr('role', 'eq', 'user')|list|length }} {{ msgs|map(attribute='role')|list }} {{ [1, 0, 2]|select|list }} {{ [1, 2, 3]|reject('odd')|list }} {{ msgs|selectattr('tool')|list|length }} {{ ['a', 'b']|map('upper')|join }}", {"msgs": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "tool": 1}, {"role": "user", "content": "c"}]}),
    ("filters_dict", "{{ d|dictsort }} {{ d|items|list }} {{ d|length }} {{ d.get('a') }} {{ d.get('q', 'none') }} {{ d.keys()|list }} {{ d.values()|list }}", {"d": {"b": 2, "a": 1}}),
    ("tojson", "{{ v|tojson }}|{{ v|tojson(indent=2) }}|{{ s|tojson }}|{{ v|tojson(sort_keys=true) }}|{{ v|tojson(separators=(',', ':')) }}|{{ e|tojson }}", {"v": {"name": "f", "args": {"x": [1, 2.5, None, True], "é": "q\"\\\n<>&'"}, "empty": {}, "list": []}, "s": "tab\there", "e": []}),
    ("tojson_ensure_ascii", "{{ s|tojson(ensure_ascii=true) }}", {"s": "é😀\u007f"}),
    ("indent", "{{ s|indent }}|{{ s|indent(2, true) }}|{{ s|indent(2, blank=true) }}", {"s": "a\n\nb\nc"}),
    ("whitespace_minus", "a  {{- ' b ' -}}  c\n  {%- if true -%}  d  {%- endif -%}  e {#- c -#} f", {}),
    ("trim_blocks", "{% if true %}\nline\n{% endif %}\nafter\n{# comment #}\nend", {}),
    ("lstrip_blocks", "x\n    {% if true %}\n    y\n    {% endif %}\n  {{ 'z' }}\n\t{# c #}\nw", {}),
    ("plus_marker", "x\n    {%+ if true %}y{% endif +%}\nz", {}),
    ("lstrip_start", "   {% if true %}A{% endif %}", {}),
    ("trailing_newline", "abc\n", {}),
    ("crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc", {}),
    ("raw", "{% raw %}{{ not rendered }}{% endraw %}", {}),
    ("raise", "{{ raise_exception('Only user and assistant roles are supported!') }}", {}),
    ("unicode_len", "{{ s|length }} {{ s[1] }} {{ s|upper }}", {"s": "日本語"}),
    ("dict_literal_in_tag", "{{ {'a': {'b': 1}} }}", {}),
    ("strftime", "{{ strftime_now('%d %b %Y') }}", {}),
    ("range", "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(3, 0, -1)|list }}", {}),
    ("method_on_item", "{{ messages[0].content.split('\\n')|length }} {{ messages[-1]['role'] }}", {"messages": [{"role": "user", "content": "a\nb"}, {"role": "x"}]}),
    ("precedence", "{{ 'a' + x | trim }}|{{ -1 | abs }}|{{ not 1 in [1] }}|{{ 'x' ~ 1 + 2 ~ 'y' }}|{{ 1 ~ 2 * 3 }}|{{ 2 ** 3 ** 2 }}|{{ 10 - 2 - 3 }}|{{ msgs | selectattr('role', 'equalto', 'system') | list | length > 0 }}", {"x": " b ", "msgs": [{"role": "system"}]}),
    ("loop_filter_index", "{% for m in msgs if m.role != 'system' %}{{ loop.index }}{{ m.role }}{{ loop.length }}{% endfor %}", {"msgs": [{"role": "system"}, {"role": "user"}, {"role": "assistant"}]}),
    ("undefined_compare", "{{ nope == none }} {{ nope is none }} {{ nope is not defined }} {{ none == none }} {{ nope|length }} {{ nope|list }} {{ nope|trim }}|{{ nope|items|list }}", {}),
    ("content_checks", "{% for m in msgs %}{%- if m.content is not none and m.content | length > 0 %}[{{ m.content }}]{% endif %}{%- if m.content is string %}s{% elif m.content is iterable %}i{% endif %}{% endfor %}", {"msgs": [{"content": "a"}, {"content": None}, {"content": ""}, {"content": [{"text": "t"}]}, {}]}),
    ("ws_combos", "<\n  {%- if true %}\n  a\n  {%- endif %}\n  {% if true -%}\n  b\n  {%- endif -%}\n>  {{- 'c' }}  \n  {#- comment #}\nd {% if true %}  \ne{% endif %}", {}),
    ("ws_comment_minus", "a\n{# c -#}\n  b\n  {# c #}  c\n{#- x #}d", {}),
    ("number_ops", "{{ 1.0 * 3 }} {{ 10 // 3.0 }} {{ 2 ** -1 }} {{ 7.5 % 2 }} {{ -7.5 // 2 }} {{ 3 / 3 }} {{ 1e20 }} {{ 12345678901234567.0 }} {{ 0.000012 }}", {}),
    ("tojson_numbers", "{{ v|tojson }}", {"v": [1e20, 1.5e-7, 0.1, 100.0, -0.0, 123456789012345678]}),
    ("tojson_indent_nested", "{{ v|tojson(indent=4) }}", {"v": {"a": [], "b": {}, "c": [{"d": [1, {"e": None}]}], "f": "x"}}),
    ("repr_strings", "{{ ['it\\'s', 'say \"hi\"', 'both \\' \"', 'tab\\t', 'é😀', 'back\\\\slash'] }}", {}),
    ("unicode_trim_title", "[{{ s|trim }}] {{ t|title }} {{ t.title() }} {{ u|capitalize }}", {"s": "\u3000abc\u00a0\n", "t": "hello-world foo_bar (x) [y] it's", "u": "hELLO World"}),
    ("list_concat_set", "{% set x = [1, 2] %}{{ x + [3] }} {{ x }} {% set y = x %}{{ y is sameas x }}", {}),
    ("string_compare", "{{ 'b' > 'a' }} {{ 'B' < 'a' }} {{ 'abc' <= 'abd' }} {{ [1, 2] < [1, 3] }}", {}),
    ("macro_defaults_scope", "{% set g = 'global' %}{% macro m(a, b=g ~ '!') %}{{ a }}-{{ b }}-{{ g }}{% endmacro %}{{ m(1) }} {{ m(2, b='x') }}", {}),
    ("namespace_in_loop", "{% set ns = namespace(found=false, idx=-1) %}{% for m in msgs %}{% if m.role == 'user' and not ns.found %}{% set ns.found = true %}{% set ns.idx = loop.index0 %}{% endif %}{% endfor %}{{ ns.found }} {{ ns.idx }}", {"msgs": [{"role": "system"}, {"role": "user"}, {"role": "user"}]}),
    ("reversed_messages", "{% for m in msgs[::-1] %}{{ (msgs|length - 1) - loop.index0 }}{{ m }}{% endfor %}", {"msgs": ["a", "b", "c"]}),
    ("dict_get_items_keys", "{% for k, v in d|dictsort %}{{ k }}{{ v }}{% endfor %} {{ d['items'] }} {{ d.get('items') }} {{ (d|items|list)[0] }}", {"d": {"z": 1, "items": "field", "a": 2}}),
    ("is_in_test", "{{ 1 is in [1, 2] }} {{ 'x' is in 'abc' }} {{ 3 is gt 2 }} {{ 2 is le 2 }} {{ 'a' is ne 'b' }}", {}),
    ("join_map_attr", "{{ tools|map(attribute='function.name')|join(', ') }} {{ tools|map(attribute='missing', default='-')|join }} {{ tools|join(',', attribute='type') }}", {"tools": [{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "b"}}]}),
    ("split_strip_chain", "{% set c = m.split('</think>')[-1].lstrip('\\n') %}{% set r = m.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}[{{ c }}][{{ r }}][{{ r.strip('\\n') }}]", {"m": "<think>\n\nreason\n</think>\n\nanswer\n"}),
    ("error_concat_binds_tighter_than_plus", "{{ 1 + 2 ~ 3 }}", {}),
    ("error_none_iter", "{% for x in none %}{% endfor %}", {}),
    ("error_int_div_zero", "{{ 1 // 0 }}", {}),
    ("error_in_none", "{{ 'a' in none }}", {}),
    ("error_tojson_undefined", "{{ nope|tojson }}", {}),
    ("falsy_select_map", "{{ none|select|list }} {{ false|map('string')|list }} {{ 0|selectattr('x')|list }} {{ ''|reject|list }}", {}),
    ("bool_arithmetic", "{{ true * 'ab' }}|{{ false * 'ab' }}|{{ true + true }}|{{ 3 - false }}|{{ [1] * true }}", {}),
    ("case_tests_and_folding", "{{ ['v'] is lower }} {{ '123' is lower }} {{ 'ABC' is upper }} {{ ['b', 'A', 'a']|max }} {{ ['b', 'A', 'a']|min }} {{ ['a', 'A', 'b']|unique|list }} {{ ['b', 'A', 'a']|max(case_sensitive=true) }} {{ ['b', 'A', 'C']|sort }}", {}),
    ("folded_negative_pow", "{{ -2 ** 2 }} {{ (1 - 3) ** 2 }} {{ -x ** 2 }} {{ (-2.0) ** 3 }} {{ -2 ** x }} {{ (1 - 3) ** x }} {{ -2.0 ** x }}", {"x": 2}),
    ("odd_even_float", "{{ 3.0 is odd }} {{ 4.0 is even }} {{ true is odd }}", {}),
    ("percent_format", "{{ '%s and %s' % ('a', 1) }}|{{ '%d%%' % 50 }}|{{ 'v=%r' % 'x' }}|{{ '%.2f' % 3.14159 }}|{{ 'plain' % {'k': 1} }}|{{ '%s' % [1, 2] }}", {}),
    ("error_percent_leftover", "{{ 'ab' % 5 }}", {}),
    ("error_unhashable_in_dict", "{{ [1] in {'k': 1} }}", {}),
    ("error_float_undefined", "{{ nope|float }}", {}),
    ("error_undefined_attr", "{{ nope.attr }}", {}),
    ("error_type", "{{ 'a' + 1 }}", {}),
    ("error_call_undefined", "{{ nope() }}", {}),
]


def load_templates(fixtures):
    tdir = os.path.join(fixtures, "templates")
    out = {}
    for fn in sorted(os.listdir(tdir)):
        if fn.endswith(".jinja"):
            name = fn[: -len(".jinja")]
            with open(os.path.join(tdir, fn), encoding="utf-8") as f:
                source = f.read()
            with open(os.path.join(tdir, name + ".tokens.json"), encoding="utf-8") as f:
                tokens = json.load(f)
            out[name] = (source, tokens)
    return out


def chat_variables(conv, tools, add_generation_prompt, tokens):
    v = {"messages": conv["messages"], "tools": tools, "documents": None,
         "add_generation_prompt": add_generation_prompt,
         "bos_token": tokens["bos_token"], "eos_token": tokens["eos_token"]}
    v.update(conv.get("extra", {}))
    return v


def build(fixtures):
    env = environment()
    with open(os.path.join(fixtures, "conversations.json"), encoding="utf-8") as f:
        convs = json.load(f)
    renders = []
    for name, (source, tokens) in load_templates(fixtures).items():
        for conv in convs["conversations"]:
            for with_tools in (False, True):
                for agp in (False, True):
                    tools = convs["tools"] if with_tools else None
                    case = {"template": name, "conversation": conv["name"], "tools": with_tools,
                            "add_generation_prompt": agp}
                    case.update(render(env, source, chat_variables(conv, tools, agp, tokens)))
                    renders.append(case)
    language = []
    for name, source, variables in LANGUAGE:
        case = {"name": name, "template": source, "variables": variables}
        case.update(render(env, source, variables))
        language.append(case)
    return {"renders.json": renders, "language.json": language}


def dump(obj):
    return json.dumps(obj, ensure_ascii=False, indent=1) + "\n"


def import_template(config_path, name, fixtures):
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)

    def token(t):
        return t.get("content", "") if isinstance(t, dict) else (t or "")

    tdir = os.path.join(fixtures, "templates")
    os.makedirs(tdir, exist_ok=True)
    with open(os.path.join(tdir, name + ".jinja"), "w", encoding="utf-8") as f:
        f.write(config["chat_template"])
    with open(os.path.join(tdir, name + ".tokens.json"), "w", encoding="utf-8") as f:
        f.write(dump({"bos_token": token(config.get("bos_token")), "eos_token": token(config.get("eos_token"))}))


def main(argv):
    if len(argv) == 4 and argv[0] == "--import":
        import_template(argv[1], argv[2], argv[3])
        return 0
    check = argv[:1] == ["--check"]
    if check:
        argv = argv[1:]
    if len(argv) != 1:
        print(__doc__)
        return 2
    fixtures = argv[0]
    built = build(fixtures)
    stale = []
    for fn, obj in built.items():
        path = os.path.join(fixtures, fn)
        text = dump(obj)
        if check:
            try:
                with open(path, encoding="utf-8") as f:
                    if f.read() != text:
                        stale.append(fn)
            except FileNotFoundError:
                stale.append(fn)
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    if check:
        if stale:
            print("stale fixtures (rerun tests/unit/jinja/make_fixtures.py tests/unit/jinja/fixtures): " + ", ".join(stale))
            return 1
        print(f"fixtures match jinja2 {jinja2.__version__}: {len(built['renders.json'])} chat renders, "
              f"{len(built['language.json'])} language cases")
        return 0
    print(f"wrote {len(built['renders.json'])} chat renders and {len(built['language.json'])} language cases")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
