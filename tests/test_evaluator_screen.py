"""The screen: every way of naming a file to the preprocessor, text the compiler and the screen
could read differently, and the EVOLVE-BLOCK contract — each refusal asserted by its check name.

The four inputs of issue 5 come first; the rest are bypasses tried against the token-stream
screen (NVRTC's own reading of the tricky ones is in test_evaluator_screen_nvrtc.py).
"""

from __future__ import annotations

import pytest

from evaluator.screen import screen, tokenize
from seeds.canonical import canonical_source, is_canonical
from seeds.registry import get_path

SEED = get_path("trsm_small").seed_source()
# Line of the first injected line: the one after // EVOLVE-BLOCK-START.
FIRST = SEED.split("\n").index("// EVOLVE-BLOCK-START") + 2


def _inject(code: str) -> str:
    return SEED.replace("// EVOLVE-BLOCK-START\n", "// EVOLVE-BLOCK-START\n" + code + "\n")


def _check(code: str) -> str | None:
    failure = screen(_inject(code), SEED)
    return failure.check if failure else None


# -- the inputs ------------------------------------------------------------------------


def test_lone_carriage_return_between_hash_and_include_is_non_canonical_text():
    failure = screen(_inject('#\rinclude "/proc/self/environ"'), SEED)
    assert failure is not None and failure.check == "non_canonical_text"
    assert failure.detail.startswith(f"line {FIRST}:")


def test_comment_backslash_then_backslash_crlf_then_include_is_non_canonical_text():
    code = '// a comment \\\n\\\r\n#include "/proc/self/environ"'
    assert _check(code) == "non_canonical_text"


def test_has_include_behind_a_digit_separator_literal_is_refused():
    """The old screen blanked '…' spans with a regex over its output: ``0x1'0`` opened a fake
    character literal that swallowed ``__has_include`` up to the next quote."""
    code = "int a = 0x1'0; int b = __has_include(\"/proc/self/environ\") + 'c';"
    failure = screen(_inject(code), SEED)
    assert failure is not None and failure.check == "include"
    assert "__has_include" in failure.detail and failure.detail.startswith(f"line {FIRST}:")


def test_non_ascii_identifier_is_a_screen_error_naming_character_and_line():
    failure = screen(_inject("__device__ float \u03b1 = 1.0f;"), SEED)
    assert failure is not None and failure.check == "non_ascii"
    assert "'\u03b1'" in failure.detail and "U+03B1" in failure.detail
    assert failure.detail.startswith(f"line {FIRST}:")


# -- canonical text ----------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["a\r\nb", "a\rb", "a\r\n\rb\n", "\r"])
def test_canonical_source_turns_every_carriage_return_into_lf(text):
    out = canonical_source(text)
    breaks = text.count("\r") + text.count("\n") - text.count("\r\n")
    assert is_canonical(out) and out.count("\n") == breaks and canonical_source(out) == out


def test_the_canonical_form_of_the_cr_attack_includes_nothing():
    """After intake, ``#`` CR ``include`` is a null directive and a line NVRTC rejects."""
    code = canonical_source('#\rinclude "/proc/self/environ"')
    assert code == '#\ninclude "/proc/self/environ"'
    assert _check(code) is None  # nothing the preprocessor would open; NVRTC reports an error


@pytest.mark.parametrize("text", ["a\r\nb", "x\rinclude"])
def test_crlf_anywhere_is_refused_even_inside_a_comment(text):
    assert _check("// " + text) == "non_canonical_text"


# -- file access -------------------------------------------------------------------------------

FILE_READS = {
    "macro_include": '#define H "/proc/self/environ"\n#include H',
    "include_next": '#include_next "x.h"',
    "line_splice": '#inc\\\nlude "x.h"',
    "has_include": '#if __has_include("/etc/passwd")\n#endif',
    "has_include_next": "#if __has_include_next(<x.h>)\n#endif",
    "comment_in_directive": '#/**/include "x.h"',
    "multiline_comment_in_directive": '# /*\n*/ include "x.h"',
    "after_multiline_comment": 'int a; /*\n*/ #include "x.h"',
    "digraph": '%:include "x.h"',
    "digraph_comment": '%: /**/ include "x.h"',
    "string_fakes_comment": 'const char* a = "/*";\n#include "/etc/passwd"\nconst char* b = "*/";',
    "embed": '#embed "x"',
    "import": '#import "x"',
    "quoted_builtin": '#include "cuda_fp16.h"',
    "angle_builtin": "#include <cuda_fp16.h>",
    "form_feed": '#\finclude "x.h"',
    "vertical_tab": '#\vinclude "x.h"',
    "digit_separator_fakes_literal": "int p = 1'0 + '/*';\n#include \"x.h\"\nint q = '*/';",
    "hex_separator_fakes_literal": "int p = 0x1'0;\n#include \"x.h\"\nint q = 'a';",
    # NVRTC ignores trigraphs in C++17 (warning 1406): ??/ splices nothing, the include stands.
    "trigraph_splice_in_comment": '// x ??/\n#include "x.h"',
    "include_in_macro_body": "#define M(x) #include",
    "indented": '   \t #   include "x.h"',
    # NVRTC splices only backslash-LF: a blank after the backslash ends the comment there.
    "backslash_blank_newline_in_comment": '// x \\ \n#include "x.h"',
}


@pytest.mark.parametrize("code", FILE_READS.values(), ids=FILE_READS.keys())
def test_every_way_of_naming_a_file_is_an_include_failure(code):
    assert _check(code) == "include"


OTHER_REFUSALS = {
    "raw_string": ('const char* r = R"(/*)";', "raw_string"),
    "prefixed_raw_string": ('const char* r = u8R"(x)";', "raw_string"),
    "token_paste_has_include": (
        '#define P(a, b) a##b\n#if P(__has_, include)("x.h")\n#endif',
        "token_paste",
    ),
    "digraph_paste": ("#define P(a, b) a%:%:b", "token_paste"),
    "ucn_directive_name": ('#\\u0069nclude "x.h"', "stray_backslash"),
    "ucn_in_identifier": ("int __has_\\u0069nclude;", "stray_backslash"),
    "backslash_blank_newline_in_code": ("#define A 1 \\ \n+ 2", "stray_backslash"),
    "line_directive": ('#line 1 "/etc/passwd"', "directive"),
    "gnu_linemarker": ('# 1 "/etc/passwd"', "directive"),
    "ident": ('#ident "x"', "directive"),
    "assert": ("#assert machine(x)", "directive"),
    "line_after_multiline_comment": ('int a; /*\n*/ #line 7 "f"', "directive"),
    "pragma_push_macro": ('#pragma push_macro("X")', "pragma"),
    "pragma_gcc_dependency": ('#pragma GCC dependency "/etc/passwd"', "pragma"),
    "pragma_include_alias": ('#pragma include_alias("a.h", "/etc/passwd")', "pragma"),
    "pragma_message": ('#pragma message("x")', "pragma"),
    "pragma_operator": ('_Pragma("push_macro(\\"X\\")")', "pragma"),
    "pragma_operator_digraph_line": ("%:pragma once", "pragma"),
    "unterminated_char": ("// fine\nint don't;", "unterminated_literal"),
    "unterminated_string": ('const char* s = "abc;', "unterminated_literal"),
    "unterminated_comment": ("/* never closed", "unterminated_comment"),
    "nul": ("int a;\x00", "control_character"),
    "escape": ("int a;\x1b[2J", "control_character"),
    "delete": ("int a;\x7f", "control_character"),
    "non_ascii_operator": ("int a = 1 \u2212 2;", "non_ascii"),
    "fullwidth_hash": ('\uff03include "x.h"', "non_ascii"),
    "nbsp": ("int\u00a0a;", "non_ascii"),
}


@pytest.mark.parametrize(("code", "check"), OTHER_REFUSALS.values(), ids=OTHER_REFUSALS.keys())
def test_text_the_compiler_could_read_otherwise_is_refused_by_name(code, check):
    failure = screen(_inject(code), SEED)
    assert failure is not None and failure.check == check, failure
    assert failure.detail.startswith("line ")


# Each form once carried a pragma past the allow-list (red-team finding 5): NVRTC executes the
# prefixed literals; the others are the ways a non-literal _Pragma argument or a count's trailing
# text could hide one.
PRAGMA_BYPASSES = {
    "wide_literal_message": '_Pragma(L"message(\\"x\\")")',
    "wide_literal_diag_suppress": '_Pragma(L"nv_diag_suppress 177")',
    "u8_literal": '_Pragma(u8"push_macro(\\"X\\")")',
    "u16_literal": '_Pragma(u"message(\\"x\\")")',
    "u32_literal": '_Pragma(U"message(\\"x\\")")',
    "wide_literal_unroll": '_Pragma(L"unroll 4")',
    "parenthesised_literal": '_Pragma(("once"))',
    "two_literals": '_Pragma("unroll" " 4")',
    "character_literal": "_Pragma('x')",
    "bare_operator_called_later": '#define KV_P _Pragma\nKV_P("message(\\"x\\")")',
    "operator_as_macro_argument": '#define KV_ID(x) x\nKV_ID(_Pragma)("once")',
    "macro_parameter_argument": '#define KV_P(x) _Pragma(x)\nKV_P("message(\\"x\\")")',
    "stringized_parameter_argument": '#define KV_P(x) _Pragma(#x)\nKV_P(message("x"))',
    "macro_built_message": (
        '#define KV_S(x) #x\n#define KV_P(x) _Pragma(KV_S(x))\nKV_P(message("hi"))'
    ),
    "seed_stringizer_message": '_Pragma(KV_STR(message("x")))',
    "seed_stringizer_trailing_text": '_Pragma(KV_STR(unroll 4 "/etc/passwd"))',
    "unclosed_invocation": "_Pragma(KV_STR(unroll 4)",
    "invocation_then_more": "_Pragma(KV_STR(unroll 4) extra)",
    "literal_unroll_trailing_text": '_Pragma("unroll 4 \\"/etc/passwd\\"")',
    "literal_escape_in_text": '_Pragma("unroll \\n 4")',
    "unroll_group_then_include": '#pragma unroll(4) include "/etc/passwd"',
    "unroll_count_then_word": "#pragma unroll 4 extra",
    "unroll_literal_count": '#pragma unroll "4"',
    "unroll_group_with_literal": '#pragma unroll (sizeof("/etc/passwd"))',
    "nounroll_trailing_text": "#pragma nounroll x y",
    "unroll_expression_unparenthesised": "#pragma unroll TRSM_UNROLL + 1",
}


@pytest.mark.parametrize("code", PRAGMA_BYPASSES.values(), ids=PRAGMA_BYPASSES.keys())
def test_every_pragma_form_outside_the_allow_list_is_a_pragma_failure(code):
    failure = screen(_inject(code), SEED)
    assert failure is not None and failure.check == "pragma", failure
    line = int(failure.detail.removeprefix("line ").split(":")[0])
    assert FIRST <= line <= FIRST + code.count("\n")  # the line of the injected _Pragma


HARMLESS = {
    "comments_and_literals": (
        '// #include "x.h"\n/* #include "y.h" */\n'
        "const char* s = \"## __has_include /*\"; char c = '\\''; int z = 1'000'000;\n"
        "double d = 0x1p+3 + 1.5e-3;"
    ),
    "non_ascii_in_comment_and_string": (
        '// \u03b1 = 1/\u221a2\n/* \u2212 */ const char* s = "\u03b2";'
    ),
    "pragma_unroll_forms": (
        "#pragma unroll\n#pragma unroll 4\n#  pragma unroll(2)\n#pragma nounroll"
    ),
    "pragma_operator_unroll": '_Pragma("unroll 4")',
    "pragma_operator_unroll_group": '_Pragma("unroll (2 * TRSM_UNROLL)")',
    "pragma_operator_nounroll": '_Pragma("nounroll")',
    "pragma_unroll_counts": (
        "#pragma unroll TRSM_UNROLL\n#pragma unroll (TRSM_UNROLL * (2 + 1))\n#pragma unroll 0x4u"
    ),
    "seed_stringizer_directly": "_Pragma(KV_STR(unroll 8))",
    "seed_stringizer_across_lines": "_Pragma(KV_STR(unroll\n  8))",
    "own_unroll_macro": "#define KV_UNROLL2(n) _Pragma(KV_STR(unroll n))\nKV_UNROLL2(2)",
    "seed_unroll_macro": "KV_UNROLL(4)",
    "stringizing_in_macro": "#define KV_S(x) #x",
    "null_directive": "#\n",
    "conditionals": "#if 1\n#elif 0\n#else\n#endif\n#ifdef A\n#endif\n#ifndef B\n#endif",
    "error_in_dead_branch": "#if 0\n#error never\n#endif",
    "file_macro": "__device__ const char* kv_where = __FILE__;",
    "splice_in_macro": "#define KV_TWO \\\n  2",
    "trigraph_like_text": "int t = 1 ?? 2 : 3;",
    "form_feed_between_functions": "\f\n__device__ int kv_f() { return 1; }",
}


@pytest.mark.parametrize("code", HARMLESS.values(), ids=HARMLESS.keys())
def test_code_that_only_looks_suspicious_passes(code):
    assert screen(_inject(code), SEED) is None


# -- the EVOLVE-BLOCK contract and size --------------------------------------------------------


def test_edits_outside_the_block_broken_markers_and_size():
    assert screen(SEED, SEED) is None
    inside = SEED.replace("#define TRSM_WARPS 4", "#define TRSM_WARPS 8")
    assert screen(inside, SEED) is None
    outside = SEED.replace("#define KV_WARP 32", "#define KV_WARP 16")
    assert screen(outside, SEED).check == "edit_outside_evolve_block"
    assert screen("#include <cuComplex.h>\n" + SEED, SEED).check == "include"
    assert screen(SEED.replace("// EVOLVE-BLOCK-END", ""), SEED).check == "evolve_block_markers"
    assert screen(SEED + "//" + "x" * 70000, SEED).check == "source_size"


def test_tokens_carry_original_lines_across_splices():
    tokens = tokenize("#define A \\\n  1\nint b;\n")
    assert isinstance(tokens, list)
    by_text = {t.text: t for t in tokens}
    assert by_text["#"].line == 1 and by_text["#"].line_start
    assert by_text["1"].line == 2 and by_text["int"].line == 3 and by_text["int"].line_start
