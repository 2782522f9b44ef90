/*
 * test_so_json_schema.c: JSON Schema to EBNF (src/structured/so_json_schema.h): the grammar text of xgrammar
 * 0.1.29's own test cases, then the language of many schemas through the matcher (valid JSON texts accepted,
 * invalid ones refused: wrong type, missing required, extra property in strict mode, out of range, wrong enum,
 * too many items, whitespace in compact mode), integer and number ranges checked value by value, vLLM's and
 * xgrammar's refusals with their messages, $ref cycles, depth limits and a 10,000-property schema.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "structured/so_json_schema.h"
#include "structured/so_match.h"
#include "test.h"

static const so_json_options WS = {.any_whitespace = true, .strict = true};
static const so_json_options COMPACT = {.any_whitespace = false, .strict = true};
static const so_json_options LOOSE = {.any_whitespace = true, .strict = false};

static const char *const UNSUPPORTED = "The provided JSON schema contains features not supported by xgrammar.";
static const char *const FAILED = "Failed to transform json schema into a grammar: ";

/* schema text -> EBNF, NULL (with a failed check) when it does not convert */
static char *to_ebnf(const char *schema, const so_json_options *o) {
    char *out = NULL;
    const vllm_status st = so_json_schema_text_to_ebnf(schema, strlen(schema), o, &out);
    CHECK_MSG(st == VLLM_OK && out, "%s: %s", schema, vllm_last_error());
    return out;
}

static so_compiled *compile_text(const char *ebnf) {
    so_grammar *g = NULL;
    so_compiled *c = NULL;
    CHECK_MSG(so_ebnf_parse(ebnf, strlen(ebnf), NULL, &g) == VLLM_OK, "%s\n%s", vllm_last_error(), ebnf);
    if (g) CHECK_MSG(so_compile(g, &c) == VLLM_OK, "%s", vllm_last_error());
    so_grammar_free(g);
    return c;
}

static so_compiled *compile_schema(const char *schema, const so_json_options *o) {
    char *e = to_ebnf(schema, o);
    so_compiled *c = e ? compile_text(e) : NULL;
    free(e);
    return c;
}

/* whether the whole of s is a sentence */
static bool accepts(const so_compiled *c, const char *s) {
    so_matcher *m = NULL;
    if (!c || so_matcher_create(c, &m) != VLLM_OK) return false;
    const bool ok = so_match_bytes(m, (const uint8_t *)s, strlen(s)) && so_match_can_end(m);
    so_matcher_free(m);
    return ok;
}

/* s with ' written as " (the schemas and JSON texts below are written with single quotes), malloc'd */
static char *dq(const char *s) {
    char *r = strdup(s);
    for (char *p = r; p && *p; p++)
        if (*p == '\'') *p = '"';
    return r;
}

/* the schema's language holds every yes[] and no no[] (NULL-terminated lists; ' read as ") */
static void lang(const char *schema_sq, const so_json_options *o, const char *const *yes, const char *const *no) {
    char *schema = dq(schema_sq);
    so_compiled *c = compile_schema(schema, o);
    CHECK_MSG(c != NULL, "%s", schema);
    for (size_t i = 0; c && yes && yes[i]; i++) {
        char *t = dq(yes[i]);
        CHECK_MSG(accepts(c, t), "%s: refused %s", schema, t);
        free(t);
    }
    for (size_t i = 0; c && no && no[i]; i++) {
        char *t = dq(no[i]);
        CHECK_MSG(!accepts(c, t), "%s: accepted %s", schema, t);
        free(t);
    }
    so_compiled_free(c);
    free(schema);
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

/* the conversion fails with status want and a message holding w1 and w2 */
static void refused(const char *schema_sq, const so_json_options *o, const char *w1, const char *w2) {
    char *schema = dq(schema_sq), *out = NULL;
    EXPECT_ERR(so_json_schema_text_to_ebnf(schema, strlen(schema), o, &out), VLLM_ERR_INVALID_ARG, w1, w2);
    CHECK_MSG(out == NULL, "%s", schema);
    free(out);
    free(schema);
}

/* ---- xgrammar's grammar texts ---- */

/* generated from xgrammar v0.1.29 tests/python/test_json_schema_converter.py (schemas from pydantic 2.13.4) */
static const struct exact_case {
    const char *name, *schema;
    bool any_ws, strict;
    const char *ebnf;
} EXACT[] = {
    {"basic",
    "{\"properties\":{\"integer_field\":{\"title\":\"Integer Field\",\"type\":\"integer\"},\"number_field\":{\"title\":\"Number Field\",\"type\":\"number\"},\"boolean_field\":{\"title\":\"Boolean Field\",\"type\":\"boolean\"},\"any_array_field\":{\"items\":{},\"title\":\"Any Array Field\",\"type\":\"array\"},\"array_field\":{\"items\":{\"type\":\"string\"},\"title\":\"Array Field\",\"type\":\"array\"},\"tuple_field\":{\"maxItems\":3,\"minItems\":3,\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"},{\"items\":{\"type\":\"string\"},\"type\":\"array\"}],\"title\":\"Tuple Field\",\"type\":\"array\"},\"object_field\":{\"additionalProperties\":{\"type\":\"integer\"},\"title\":\"Object Field\",\"type\":\"object\"},\"nested_object_field\":{\"additionalProperties\":{\"additionalProperties\":{\"type\":\"integer\"},\"type\":\"object\"},\"title\":\"Nested Object Field\",\"type\":\"object\"}},\"required\":[\"integer_field\",\"number_field\",\"boolean_field\",\"any_array_field\",\"array_field\",\"tuple_field\",\"object_field\",\"nested_object_field\"],\"title\":\"MainModel\",\"type\":\"object\"}",
    false, true,
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" \"\" basic_any (\", \" basic_any)* \"\" \"]\") | (\"[\" \"\" \"]\"))\n"
    "basic_object ::= (\"{\" \"\" basic_string \": \" basic_any (\", \" basic_string \": \" basic_any)* \"\" \"}\") | \"{\" \"}\"\n"
    "root_prop_3 ::= ((\"[\" \"\" basic_any (\", \" basic_any)* \"\" \"]\") | (\"[\" \"\" \"]\"))\n"
    "root_prop_4 ::= ((\"[\" \"\" basic_string (\", \" basic_string)* \"\" \"]\") | (\"[\" \"\" \"]\"))\n"
    "root_prop_5_item_2 ::= ((\"[\" \"\" basic_string (\", \" basic_string)* \"\" \"]\") | (\"[\" \"\" \"]\"))\n"
    "root_prop_5 ::= (\"[\" \"\" (basic_string \", \" basic_integer \", \" root_prop_5_item_2) \"\" \"]\")\n"
    "root_prop_6 ::= (\"{\" \"\" basic_string \": \" basic_integer (\", \" basic_string \": \" basic_integer)* \"\" \"}\") | \"{\" \"}\"\n"
    "root_prop_7_addl ::= (\"{\" \"\" basic_string \": \" basic_integer (\", \" basic_string \": \" basic_integer)* \"\" \"}\") | \"{\" \"}\"\n"
    "root_prop_7 ::= (\"{\" \"\" basic_string \": \" root_prop_7_addl (\", \" basic_string \": \" root_prop_7_addl)* \"\" \"}\") | \"{\" \"}\"\n"
    "root_part_6 ::= \", \" \"\\\"nested_object_field\\\"\" \": \" root_prop_7 \"\"\n"
    "root_part_5 ::= \", \" \"\\\"object_field\\\"\" \": \" root_prop_6 root_part_6\n"
    "root_part_4 ::= \", \" \"\\\"tuple_field\\\"\" \": \" root_prop_5 root_part_5\n"
    "root_part_3 ::= \", \" \"\\\"array_field\\\"\" \": \" root_prop_4 root_part_4\n"
    "root_part_2 ::= \", \" \"\\\"any_array_field\\\"\" \": \" root_prop_3 root_part_3\n"
    "root_part_1 ::= \", \" \"\\\"boolean_field\\\"\" \": \" basic_boolean root_part_2\n"
    "root_part_0 ::= \", \" \"\\\"number_field\\\"\" \": \" basic_number root_part_1\n"
    "root ::= \"{\" \"\" ((\"\\\"integer_field\\\"\" \": \" basic_integer root_part_0)) \"\" \"}\"\n"},
    {"enum_const",
    "{\"$defs\":{\"Field\":{\"enum\":[\"foo\",\"bar\"],\"title\":\"Field\",\"type\":\"string\"}},\"properties\":{\"bars\":{\"const\":\"a\",\"title\":\"Bars\",\"type\":\"string\"},\"str_values\":{\"const\":\"a\\n\\r\\\"\",\"title\":\"Str Values\",\"type\":\"string\"},\"foo\":{\"enum\":[\"a\",\"b\",\"c\"],\"title\":\"Foo\",\"type\":\"string\"},\"values\":{\"enum\":[1,\"a\",true],\"title\":\"Values\"},\"field\":{\"$ref\":\"#/$defs/Field\"}},\"required\":[\"bars\",\"str_values\",\"foo\",\"values\",\"field\"],\"title\":\"EnumModel\",\"type\":\"object\"}",
    false, true,
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" \"\" basic_any (\", \" basic_any)* \"\" \"]\") | (\"[\" \"\" \"]\"))\n"
    "basic_object ::= (\"{\" \"\" basic_string \": \" basic_any (\", \" basic_string \": \" basic_any)* \"\" \"}\") | \"{\" \"}\"\n"
    "root_prop_0 ::= \"\\\"a\\\"\"\n"
    "root_prop_1 ::= \"\\\"a\\\\n\\\\r\\\\\\\"\\\"\"\n"
    "root_prop_2 ::= (\"\\\"a\\\"\") | (\"\\\"b\\\"\") | (\"\\\"c\\\"\")\n"
    "root_prop_3 ::= (\"1\") | (\"\\\"a\\\"\") | (\"true\")\n"
    "defs_Field ::= (\"\\\"foo\\\"\") | (\"\\\"bar\\\"\")\n"
    "root_prop_4 ::= defs_Field\n"
    "root_part_3 ::= \", \" \"\\\"field\\\"\" \": \" root_prop_4 \"\"\n"
    "root_part_2 ::= \", \" \"\\\"values\\\"\" \": \" root_prop_3 root_part_3\n"
    "root_part_1 ::= \", \" \"\\\"foo\\\"\" \": \" root_prop_2 root_part_2\n"
    "root_part_0 ::= \", \" \"\\\"str_values\\\"\" \": \" root_prop_1 root_part_1\n"
    "root ::= \"{\" \"\" ((\"\\\"bars\\\"\" \": \" root_prop_0 root_part_0)) \"\" \"}\"\n"},
    {"optional",
    "{\"properties\":{\"num\":{\"default\":0,\"title\":\"Num\",\"type\":\"integer\"},\"opt_bool\":{\"anyOf\":[{\"type\":\"boolean\"},{\"type\":\"null\"}],\"default\":null,\"title\":\"Opt Bool\"},\"size\":{\"anyOf\":[{\"type\":\"number\"},{\"type\":\"null\"}],\"title\":\"Size\"},\"name\":{\"default\":\"\",\"title\":\"Name\",\"type\":\"string\"}},\"required\":[\"size\"],\"title\":\"OptModel\",\"type\":\"object\"}",
    false, true,
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" \"\" basic_any (\", \" basic_any)* \"\" \"]\") | (\"[\" \"\" \"]\"))\n"
    "basic_object ::= (\"{\" \"\" basic_string \": \" basic_any (\", \" basic_string \": \" basic_any)* \"\" \"}\") | \"{\" \"}\"\n"
    "root_prop_1 ::= basic_boolean | basic_null\n"
    "root_prop_2 ::= basic_number | basic_null\n"
    "root_part_2 ::= \"\" | \", \" \"\\\"name\\\"\" \": \" basic_string \"\"\n"
    "root_part_1 ::= \", \" \"\\\"size\\\"\" \": \" root_prop_2 root_part_2\n"
    "root_part_0 ::= root_part_1 | \", \" \"\\\"opt_bool\\\"\" \": \" root_prop_1 root_part_1\n"
    "root ::= \"{\" \"\" ((\"\\\"num\\\"\" \": \" basic_integer root_part_0) | (\"\\\"opt_bool\\\"\" \": \" root_prop_1 root_part_1) | (\"\\\"size\\\"\" \": \" root_prop_2 root_part_2)) \"\" \"}\"\n"},
    {"all_optional",
    "{\"properties\":{\"size\":{\"default\":0,\"title\":\"Size\",\"type\":\"integer\"},\"state\":{\"default\":false,\"title\":\"State\",\"type\":\"boolean\"},\"num\":{\"default\":0,\"title\":\"Num\",\"type\":\"number\"}},\"title\":\"AllOpt\",\"type\":\"object\"}",
    false, true,
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" \"\" basic_any (\", \" basic_any)* \"\" \"]\") | (\"[\" \"\" \"]\"))\n"
    "basic_object ::= (\"{\" \"\" basic_string \": \" basic_any (\", \" basic_string \": \" basic_any)* \"\" \"}\") | \"{\" \"}\"\n"
    "root_part_1 ::= \"\" | \", \" \"\\\"num\\\"\" \": \" basic_number \"\"\n"
    "root_part_0 ::= root_part_1 | \", \" \"\\\"state\\\"\" \": \" basic_boolean root_part_1\n"
    "root ::= (\"{\" \"\" ((\"\\\"size\\\"\" \": \" basic_integer root_part_0) | (\"\\\"state\\\"\" \": \" basic_boolean root_part_1) | (\"\\\"num\\\"\" \": \" basic_number \"\")) \"\" \"}\") | \"{\" \"}\"\n"},
    {"all_optional_non_strict",
    "{\"properties\":{\"size\":{\"default\":0,\"title\":\"Size\",\"type\":\"integer\"},\"state\":{\"default\":false,\"title\":\"State\",\"type\":\"boolean\"},\"num\":{\"default\":0,\"title\":\"Num\",\"type\":\"number\"}},\"title\":\"AllOpt\",\"type\":\"object\"}",
    false, false,
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" \"\" basic_any (\", \" basic_any)* \"\" \"]\") | (\"[\" \"\" \"]\"))\n"
    "basic_object ::= (\"{\" \"\" basic_string \": \" basic_any (\", \" basic_string \": \" basic_any)* \"\" \"}\") | \"{\" \"}\"\n"
    "root_part_2 ::= (\", \" basic_string \": \" basic_any)*\n"
    "root_part_1 ::= root_part_2 | \", \" \"\\\"num\\\"\" \": \" basic_number root_part_2\n"
    "root_part_0 ::= root_part_1 | \", \" \"\\\"state\\\"\" \": \" basic_boolean root_part_1\n"
    "root ::= (\"{\" \"\" ((\"\\\"size\\\"\" \": \" basic_integer root_part_0) | (\"\\\"state\\\"\" \": \" basic_boolean root_part_1) | (\"\\\"num\\\"\" \": \" basic_number root_part_2) | basic_string \": \" basic_any root_part_2) \"\" \"}\") | \"{\" \"}\"\n"},
    {"empty",
    "{\"properties\":{},\"title\":\"Empty\",\"type\":\"object\"}",
    false, true,
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" \"\" basic_any (\", \" basic_any)* \"\" \"]\") | (\"[\" \"\" \"]\"))\n"
    "basic_object ::= (\"{\" \"\" basic_string \": \" basic_any (\", \" basic_string \": \" basic_any)* \"\" \"}\") | \"{\" \"}\"\n"
    "root ::= \"{\" \"}\"\n"},
    {"reference",
    "{\"$defs\":{\"Bar\":{\"properties\":{\"apple\":{\"default\":\"x\",\"title\":\"Apple\",\"type\":\"string\"},\"banana\":{\"default\":\"y\",\"title\":\"Banana\",\"type\":\"string\"}},\"title\":\"Bar\",\"type\":\"object\"},\"Foo\":{\"properties\":{\"count\":{\"title\":\"Count\",\"type\":\"integer\"},\"size\":{\"anyOf\":[{\"type\":\"number\"},{\"type\":\"null\"}],\"default\":null,\"title\":\"Size\"}},\"required\":[\"count\"],\"title\":\"Foo\",\"type\":\"object\"}},\"properties\":{\"foo\":{\"$ref\":\"#/$defs/Foo\"},\"bars\":{\"items\":{\"$ref\":\"#/$defs/Bar\"},\"title\":\"Bars\",\"type\":\"array\"}},\"required\":[\"foo\",\"bars\"],\"title\":\"RefModel\",\"type\":\"object\"}",
    false, true,
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" \"\" basic_any (\", \" basic_any)* \"\" \"]\") | (\"[\" \"\" \"]\"))\n"
    "basic_object ::= (\"{\" \"\" basic_string \": \" basic_any (\", \" basic_string \": \" basic_any)* \"\" \"}\") | \"{\" \"}\"\n"
    "defs_Foo_prop_1 ::= basic_number | basic_null\n"
    "defs_Foo_part_0 ::= \"\" | \", \" \"\\\"size\\\"\" \": \" defs_Foo_prop_1 \"\"\n"
    "defs_Foo ::= \"{\" \"\" ((\"\\\"count\\\"\" \": \" basic_integer defs_Foo_part_0)) \"\" \"}\"\n"
    "root_prop_0 ::= defs_Foo\n"
    "defs_Bar_part_0 ::= \"\" | \", \" \"\\\"banana\\\"\" \": \" basic_string \"\"\n"
    "defs_Bar ::= (\"{\" \"\" ((\"\\\"apple\\\"\" \": \" basic_string defs_Bar_part_0) | (\"\\\"banana\\\"\" \": \" basic_string \"\")) \"\" \"}\") | \"{\" \"}\"\n"
    "root_prop_1_additional ::= defs_Bar\n"
    "root_prop_1 ::= ((\"[\" \"\" root_prop_1_additional (\", \" root_prop_1_additional)* \"\" \"]\") | (\"[\" \"\" \"]\"))\n"
    "root_part_0 ::= \", \" \"\\\"bars\\\"\" \": \" root_prop_1 \"\"\n"
    "root ::= \"{\" \"\" ((\"\\\"foo\\\"\" \": \" root_prop_0 root_part_0)) \"\" \"}\"\n"},
    {"union",
    "{\"$defs\":{\"Cat\":{\"properties\":{\"name\":{\"title\":\"Name\",\"type\":\"string\"},\"color\":{\"title\":\"Color\",\"type\":\"string\"}},\"required\":[\"name\",\"color\"],\"title\":\"Cat\",\"type\":\"object\"},\"Dog\":{\"properties\":{\"name\":{\"title\":\"Name\",\"type\":\"string\"},\"breed\":{\"title\":\"Breed\",\"type\":\"string\"}},\"required\":[\"name\",\"breed\"],\"title\":\"Dog\",\"type\":\"object\"}},\"anyOf\":[{\"$ref\":\"#/$defs/Cat\"},{\"$ref\":\"#/$defs/Dog\"}]}",
    false, true,
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" \"\" basic_any (\", \" basic_any)* \"\" \"]\") | (\"[\" \"\" \"]\"))\n"
    "basic_object ::= (\"{\" \"\" basic_string \": \" basic_any (\", \" basic_string \": \" basic_any)* \"\" \"}\") | \"{\" \"}\"\n"
    "defs_Cat_part_0 ::= \", \" \"\\\"color\\\"\" \": \" basic_string \"\"\n"
    "defs_Cat ::= \"{\" \"\" ((\"\\\"name\\\"\" \": \" basic_string defs_Cat_part_0)) \"\" \"}\"\n"
    "root_case_0 ::= defs_Cat\n"
    "defs_Dog_part_0 ::= \", \" \"\\\"breed\\\"\" \": \" basic_string \"\"\n"
    "defs_Dog ::= \"{\" \"\" ((\"\\\"name\\\"\" \": \" basic_string defs_Dog_part_0)) \"\" \"}\"\n"
    "root_case_1 ::= defs_Dog\n"
    "root ::= root_case_0 | root_case_1\n"},
    {"alias_space",
    "{\"properties\":{\"name 1\":{\"const\":\"abc\",\"title\":\"Name 1\",\"type\":\"string\"}},\"required\":[\"name 1\"],\"title\":\"Space\",\"type\":\"object\"}",
    false, true,
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" \"\" basic_any (\", \" basic_any)* \"\" \"]\") | (\"[\" \"\" \"]\"))\n"
    "basic_object ::= (\"{\" \"\" basic_string \": \" basic_any (\", \" basic_string \": \" basic_any)* \"\" \"}\") | \"{\" \"}\"\n"
    "root_prop_0 ::= \"\\\"abc\\\"\"\n"
    "root ::= \"{\" \"\" ((\"\\\"name 1\\\"\" \": \" root_prop_0 \"\")) \"\" \"}\"\n"},
    {"any_whitespace",
    "{\"properties\":{\"value\":{\"title\":\"Value\",\"type\":\"string\"},\"arr\":{\"items\":{\"type\":\"integer\"},\"title\":\"Arr\",\"type\":\"array\"},\"obj\":{\"additionalProperties\":{\"type\":\"integer\"},\"title\":\"Obj\",\"type\":\"object\"}},\"required\":[\"value\",\"arr\",\"obj\"],\"title\":\"Simple\",\"type\":\"object\"}",
    true, true,
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"]\") | (\"[\" [ \\n\\t]* \"]\"))\n"
    "basic_object ::= (\"{\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"}\") | \"{\" [ \\n\\t]* \"}\"\n"
    "root_prop_1 ::= ((\"[\" [ \\n\\t]* basic_integer ([ \\n\\t]* \",\" [ \\n\\t]* basic_integer)* [ \\n\\t]* \"]\") | (\"[\" [ \\n\\t]* \"]\"))\n"
    "root_prop_2 ::= (\"{\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_integer ([ \\n\\t]* \",\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_integer)* [ \\n\\t]* \"}\") | \"{\" [ \\n\\t]* \"}\"\n"
    "root_part_1 ::= [ \\n\\t]* \",\" [ \\n\\t]* \"\\\"obj\\\"\" [ \\n\\t]* \":\" [ \\n\\t]* root_prop_2 \"\"\n"
    "root_part_0 ::= [ \\n\\t]* \",\" [ \\n\\t]* \"\\\"arr\\\"\" [ \\n\\t]* \":\" [ \\n\\t]* root_prop_1 root_part_1\n"
    "root ::= \"{\" [ \\n\\t]* ((\"\\\"value\\\"\" [ \\n\\t]* \":\" [ \\n\\t]* basic_string root_part_0)) [ \\n\\t]* \"}\"\n"},
    {"any_whitespace_non_strict",
    "{\"properties\":{\"value\":{\"title\":\"Value\",\"type\":\"string\"},\"arr\":{\"items\":{\"type\":\"integer\"},\"title\":\"Arr\",\"type\":\"array\"},\"obj\":{\"additionalProperties\":{\"type\":\"integer\"},\"title\":\"Obj\",\"type\":\"object\"}},\"required\":[\"value\",\"arr\",\"obj\"],\"title\":\"Simple\",\"type\":\"object\"}",
    true, false,
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"]\") | (\"[\" [ \\n\\t]* \"]\"))\n"
    "basic_object ::= (\"{\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"}\") | \"{\" [ \\n\\t]* \"}\"\n"
    "root_prop_1 ::= ((\"[\" [ \\n\\t]* basic_integer ([ \\n\\t]* \",\" [ \\n\\t]* basic_integer)* [ \\n\\t]* \"]\") | (\"[\" [ \\n\\t]* \"]\"))\n"
    "root_prop_2 ::= (\"{\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_integer ([ \\n\\t]* \",\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_integer)* [ \\n\\t]* \"}\") | \"{\" [ \\n\\t]* \"}\"\n"
    "root_part_2 ::= ([ \\n\\t]* \",\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any)*\n"
    "root_part_1 ::= [ \\n\\t]* \",\" [ \\n\\t]* \"\\\"obj\\\"\" [ \\n\\t]* \":\" [ \\n\\t]* root_prop_2 root_part_2\n"
    "root_part_0 ::= [ \\n\\t]* \",\" [ \\n\\t]* \"\\\"arr\\\"\" [ \\n\\t]* \":\" [ \\n\\t]* root_prop_1 root_part_1\n"
    "root ::= \"{\" [ \\n\\t]* ((\"\\\"value\\\"\" [ \\n\\t]* \":\" [ \\n\\t]* basic_string root_part_0)) [ \\n\\t]* \"}\"\n"},
    {"non_strict_prefix",
    "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"integer\"}]}",
    true, false,
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"]\") | (\"[\" [ \\n\\t]* \"]\"))\n"
    "basic_object ::= (\"{\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"}\") | \"{\" [ \\n\\t]* \"}\"\n"
    "root ::= (\"[\" [ \\n\\t]* (basic_integer [ \\n\\t]* \",\" [ \\n\\t]* basic_integer) ([ \\n\\t]* \",\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"]\")\n"},
    {"non_strict_object",
    "{\"type\":\"object\",\"properties\":{\"foo\":{\"type\":\"integer\"},\"bar\":{\"type\":\"integer\"}},\"required\":[\"foo\",\"bar\"]}",
    true, false,
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"]\") | (\"[\" [ \\n\\t]* \"]\"))\n"
    "basic_object ::= (\"{\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"}\") | \"{\" [ \\n\\t]* \"}\"\n"
    "root_part_1 ::= ([ \\n\\t]* \",\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any)*\n"
    "root_part_0 ::= [ \\n\\t]* \",\" [ \\n\\t]* \"\\\"bar\\\"\" [ \\n\\t]* \":\" [ \\n\\t]* basic_integer root_part_1\n"
    "root ::= \"{\" [ \\n\\t]* ((\"\\\"foo\\\"\" [ \\n\\t]* \":\" [ \\n\\t]* basic_integer root_part_0)) [ \\n\\t]* \"}\"\n"},
    {"array_0",
    "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"}},\"required\":[\"name\",\"age\"]}}",
    true, true,
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"]\") | (\"[\" [ \\n\\t]* \"]\"))\n"
    "basic_object ::= (\"{\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"}\") | \"{\" [ \\n\\t]* \"}\"\n"
    "root_additional_part_0 ::= [ \\n\\t]* \",\" [ \\n\\t]* \"\\\"age\\\"\" [ \\n\\t]* \":\" [ \\n\\t]* basic_integer \"\"\n"
    "root_additional ::= \"{\" [ \\n\\t]* ((\"\\\"name\\\"\" [ \\n\\t]* \":\" [ \\n\\t]* basic_string root_additional_part_0)) [ \\n\\t]* \"}\"\n"
    "root ::= ((\"[\" [ \\n\\t]* root_additional ([ \\n\\t]* \",\" [ \\n\\t]* root_additional)* [ \\n\\t]* \"]\") | (\"[\" [ \\n\\t]* \"]\"))\n"},
    {"array_1",
    "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"}},\"required\":[\"name\",\"age\"]},{\"type\":\"integer\"},{\"type\":\"string\"}],\"additionalItems\":false}",
    true, true,
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"]\") | (\"[\" [ \\n\\t]* \"]\"))\n"
    "basic_object ::= (\"{\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"}\") | \"{\" [ \\n\\t]* \"}\"\n"
    "root_item_0_part_0 ::= [ \\n\\t]* \",\" [ \\n\\t]* \"\\\"age\\\"\" [ \\n\\t]* \":\" [ \\n\\t]* basic_integer \"\"\n"
    "root_item_0 ::= \"{\" [ \\n\\t]* ((\"\\\"name\\\"\" [ \\n\\t]* \":\" [ \\n\\t]* basic_string root_item_0_part_0)) [ \\n\\t]* \"}\"\n"
    "root ::= (\"[\" [ \\n\\t]* (root_item_0 [ \\n\\t]* \",\" [ \\n\\t]* basic_integer [ \\n\\t]* \",\" [ \\n\\t]* basic_string) [ \\n\\t]* \"]\")\n"},
    {"array_2",
    "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"}},\"required\":[\"name\",\"age\"]},{\"type\":\"integer\"}],\"unevaluatedItems\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"}},\"required\":[\"name\"]}}",
    true, true,
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"]\") | (\"[\" [ \\n\\t]* \"]\"))\n"
    "basic_object ::= (\"{\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"}\") | \"{\" [ \\n\\t]* \"}\"\n"
    "root_item_0_part_0 ::= [ \\n\\t]* \",\" [ \\n\\t]* \"\\\"age\\\"\" [ \\n\\t]* \":\" [ \\n\\t]* basic_integer \"\"\n"
    "root_item_0 ::= \"{\" [ \\n\\t]* ((\"\\\"name\\\"\" [ \\n\\t]* \":\" [ \\n\\t]* basic_string root_item_0_part_0)) [ \\n\\t]* \"}\"\n"
    "root_additional ::= \"{\" [ \\n\\t]* ((\"\\\"name\\\"\" [ \\n\\t]* \":\" [ \\n\\t]* basic_string \"\")) [ \\n\\t]* \"}\"\n"
    "root ::= (\"[\" [ \\n\\t]* (root_item_0 [ \\n\\t]* \",\" [ \\n\\t]* basic_integer) ([ \\n\\t]* \",\" [ \\n\\t]* root_additional)* [ \\n\\t]* \"]\")\n"},
    {"array_min_max_0",
    "{\"type\":\"array\",\"items\":false,\"prefixItems\":[]}",
    true, true,
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"]\") | (\"[\" [ \\n\\t]* \"]\"))\n"
    "basic_object ::= (\"{\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"}\") | \"{\" [ \\n\\t]* \"}\"\n"
    "root ::= (\"[\" [ \\n\\t]* \"]\")\n"},
    {"array_min_max_1",
    "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":0,\"maxItems\":0}",
    true, true,
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"]\") | (\"[\" [ \\n\\t]* \"]\"))\n"
    "basic_object ::= (\"{\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"}\") | \"{\" [ \\n\\t]* \"}\"\n"
    "root ::= (\"[\" [ \\n\\t]* \"]\")\n"},
    {"array_min_max_2",
    "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":0,\"maxItems\":2}",
    true, true,
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"]\") | (\"[\" [ \\n\\t]* \"]\"))\n"
    "basic_object ::= (\"{\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"}\") | \"{\" [ \\n\\t]* \"}\"\n"
    "root ::= ((\"[\" [ \\n\\t]* basic_integer ([ \\n\\t]* \",\" [ \\n\\t]* basic_integer)? [ \\n\\t]* \"]\") | (\"[\" [ \\n\\t]* \"]\"))\n"},
    {"array_min_max_3",
    "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}",
    true, true,
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"]\") | (\"[\" [ \\n\\t]* \"]\"))\n"
    "basic_object ::= (\"{\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"}\") | \"{\" [ \\n\\t]* \"}\"\n"
    "root ::= (\"[\" [ \\n\\t]* basic_integer ([ \\n\\t]* \",\" [ \\n\\t]* basic_integer){1,2} [ \\n\\t]* \"]\")\n"},
    {"array_min_max_4",
    "{\"type\":\"array\",\"items\":false,\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}",
    true, true,
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"]\") | (\"[\" [ \\n\\t]* \"]\"))\n"
    "basic_object ::= (\"{\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"}\") | \"{\" [ \\n\\t]* \"}\"\n"
    "root ::= (\"[\" [ \\n\\t]* (basic_string [ \\n\\t]* \",\" [ \\n\\t]* basic_integer) [ \\n\\t]* \"]\")\n"},
    {"array_min_max_5",
    "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":{\"type\":\"boolean\"},\"minItems\":3,\"maxItems\":4}",
    true, true,
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"]\") | (\"[\" [ \\n\\t]* \"]\"))\n"
    "basic_object ::= (\"{\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"}\") | \"{\" [ \\n\\t]* \"}\"\n"
    "root ::= (\"[\" [ \\n\\t]* (basic_string [ \\n\\t]* \",\" [ \\n\\t]* basic_integer) ([ \\n\\t]* \",\" [ \\n\\t]* basic_boolean){1,2} [ \\n\\t]* \"]\")\n"},
    {"array_min_max_6",
    "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":{\"type\":\"boolean\"},\"minItems\":3}",
    true, true,
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"]\") | (\"[\" [ \\n\\t]* \"]\"))\n"
    "basic_object ::= (\"{\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"}\") | \"{\" [ \\n\\t]* \"}\"\n"
    "root ::= (\"[\" [ \\n\\t]* (basic_string [ \\n\\t]* \",\" [ \\n\\t]* basic_integer) ([ \\n\\t]* \",\" [ \\n\\t]* basic_boolean)+ [ \\n\\t]* \"]\")\n"},
};

static void test_exact(void) {
    for (size_t i = 0; i < sizeof EXACT / sizeof *EXACT; i++) {
        const struct exact_case *e = &EXACT[i];
        const so_json_options o = {.any_whitespace = e->any_ws, .strict = e->strict};
        char *g = to_ebnf(e->schema, &o);
        if (!g) continue;
        CHECK_MSG(!strcmp(g, e->ebnf), "%s: got\n%s\nwant\n%s", e->name, g, e->ebnf);
        so_compiled *c = compile_text(g);
        CHECK_MSG(c != NULL, "%s", e->name);
        so_compiled_free(c);
        free(g);
    }
    /* json_object: the root is the basic object rule (any whitespace, the default options) */
    const char *ws_case = NULL;
    for (size_t i = 0; i < sizeof EXACT / sizeof *EXACT; i++)
        if (!strcmp(EXACT[i].name, "any_whitespace")) ws_case = EXACT[i].ebnf;
    const size_t basic_len = ws_case ? (size_t)(strstr(ws_case, "root_prop_1 ::=") - ws_case) : 0;
    char *g = NULL;
    const char *obj = "{\"type\": \"object\", \"title\": \"x\"}";
    CHECK_OK(so_json_schema_text_to_ebnf(obj, strlen(obj), NULL, &g));
    CHECK(g && ws_case && strlen(g) > basic_len && !strncmp(g, ws_case, basic_len) &&
          !strcmp(g + basic_len, "root ::= basic_object\n"));
    free(g);
    g = NULL;
    CHECK_OK(so_json_schema_to_ebnf(json_true(), &COMPACT, &g));
    CHECK(g && strstr(g, "\nroot ::= basic_any\n"));
    free(g);
    const so_json_options d = so_json_default_options();
    CHECK(d.any_whitespace && d.strict);
}

/* ---- languages ---- */

static void test_json_object(void) {
    lang("{'type': 'object'}", &WS, L("{}", "{ }", "{'a':1}", "{ 'a' : [1, {'b': null}], 'c': 'x' }", "{\n\t'k': -0.5e3\n}"),
         L("[]", " {}", "{} ", "1", "'a'", "{'a':1,}", "{\r'a':1}", "{'a':01}"));
    lang("{'type': 'object'}", &COMPACT, L("{}", "{'a': 1}", "{'a': 1, 'b': [1, 2]}", "{'a': {'b': []}}"),
         L("{ }", "{'a':1}", "{'a': 1,'b': 2}", "{'a': [1,2]}", "{'a': 1} "));
    lang("{'type': 'array'}", &WS, L("[]", "[1, 'a', {}, [null]]"), L("{}", "[,]"));
    lang("true", &WS, L("1", "-0", "'a'", "[]", "{}", "null", "true", "1.5E-3"), L("", "nul", "'a"));
    lang("{}", &WS, L("1", "{'a': []}"), L("x"));
    lang("{'title': 'only a title', 'description': 'd'}", &WS, L("[1]", "false"), NULL);
}

static void test_objects(void) {
    const char *s = "{'type': 'object', 'properties': {'name': {'type': 'string'}, 'age': {'type': 'integer'}, "
                    "'tags': {'type': 'array', 'items': {'type': 'string'}}}, 'required': ['name', 'age']}";
    lang(s, &WS,
         L("{'name':'a','age':1}", "{'name': 'a', 'age': -3, 'tags': ['x', 'y']}",
           "{\n  'name' : '\\u00e9\\n\\'', 'age':0,'tags':[]\n}", "{'name':'\xc3\xa9','age':10}"),
         L("{'name':'a'}", "{'age':1,'name':'a'}", "{'name':'a','age':1,'x':2}", "{'name':1,'age':1}",
           "{'name':'a','age':1.5}", "{'name':'a','age':01}", "{'name':'a','age':-0}", "{'name':'a','age':1,'tags':[1]}",
           "{'name':'a\nb','age':1}", "{'name':'a\x01','age':1}", "{'name':'\\x','age':1}", "{}",
           "{'name':'a','age':1,'tags':['x'],}"));
    lang(s, &LOOSE, L("{'name':'a','age':1,'x':2}", "{'name':'a','age':1,'tags':[],'x':{'y':[]}}"),
         L("{'x':2,'name':'a','age':1}", "{'name':'a'}"));
    lang("{'type': 'object', 'properties': {'a': {'type': 'integer'}}, 'additionalProperties': true}", &WS,
         L("{}", "{'a': 1}", "{'a': 1, 'b': [2]}", "{'b': 'x'}", "{'a': 'x'}"), L("{'a': 1,}", "{'a' 1}"));
    /* (as in xgrammar, a named key may come again as another property: {'a': 'x'} is accepted above) */
    lang("{'type': 'object', 'properties': {'a': {'type': 'integer'}}, 'required': ['a'], "
         "'additionalProperties': {'type': 'integer'}}",
         &WS, L("{'a': 1}", "{'a': 1, 'b': 2, 'c': 3}"), L("{'a': 1, 'b': 'x'}", "{'b': 2}", "{}"));
    lang("{'type': 'object', 'properties': {'a': {'type': 'integer'}}, 'unevaluatedProperties': {'type': 'string'}}",
         &WS, L("{'a': 1, 'b': 'x'}", "{'b': 'x'}"), L("{'b': 1}"));
    lang("{'type': 'object', 'properties': {'a': {'type': 'integer'}}, 'additionalProperties': false}", &LOOSE,
         L("{'a': 1}", "{}"), L("{'a': 1, 'b': 2}"));
    /* an empty properties object is strict: only {} (xgrammar writes no whitespace inside) */
    lang("{'type': 'object', 'properties': {}}", &WS, L("{}"), L("{ }", "{'a': 1}"));
    lang("{'properties': {'a': {'type': 'boolean'}}, 'required': ['a']}", &WS, L("{'a': true}"), L("{'a': 1}", "{}"));
    /* nested objects */
    lang("{'type': 'object', 'properties': {'user': {'type': 'object', 'properties': {'id': {'type': 'integer'}, "
         "'address': {'type': 'object', 'properties': {'city': {'type': 'string'}, 'zip': {'type': 'string'}}, "
         "'required': ['city']}}, 'required': ['id', 'address']}}, 'required': ['user']}",
         &WS,
         L("{'user':{'id':1,'address':{'city':'x'}}}", "{'user': {'id': 1, 'address': {'city': 'x', 'zip': '1'}}}"),
         L("{'user':{'id':1,'address':{}}}", "{'user':{'id':1}}", "{'user':{'id':1,'address':{'city':'x','zip':1}}}",
           "{'user':{'id':1,'address':{'city':'x'},'extra':1}}", "{'user':{'address':{'city':'x'},'id':1}}"));
    /* keys that JSON escapes are written escaped */
    lang("{'type': 'object', 'properties': {'a\\'b\\\\c': {'type': 'null'}, 'x/y': {'type': 'null'}}, "
         "'required': ['a\\'b\\\\c', 'x/y']}",
         &COMPACT, L("{'a\\'b\\\\c': null, 'x/y': null}"), L("{'a'b\\c': null, 'x/y': null}", "{'x/y': null}"));
}

static void test_compact(void) {
    const char *s = "{'type': 'object', 'properties': {'a': {'type': 'integer'}, 'b': {'type': 'array', "
                    "'items': {'type': 'integer'}}}, 'required': ['a', 'b']}";
    lang(s, &COMPACT, L("{'a': 1, 'b': [1, 2]}", "{'a': 1, 'b': []}"),
         L("{'a':1, 'b': []}", "{'a': 1, 'b': [1,2]}", "{ 'a': 1, 'b': []}", "{'a': 1, 'b': [ ]}", "{'a': 1,\n'b': []}",
           "{'a': 1, 'b': [] }"));
    lang(s, &WS, L("{'a':1,'b':[1,2]}", "{ 'a' : 1 ,\n\t'b' : [ 1 , 2 ] }"),
         L(" {'a':1,'b':[]}", "{'a':1,'b':[]} ", "{'a':1,\r'b':[]}"));
}

static void test_arrays(void) {
    lang("{'type': 'array', 'items': {'type': 'object', 'properties': {'n': {'type': 'string'}, 'v': "
         "{'type': 'number'}}, 'required': ['n']}, 'minItems': 1, 'maxItems': 3}",
         &WS, L("[{'n':'a'}]", "[{'n':'a','v':1.5e3},{'n':'b','v':-0.5}]", "[ {'n':'a'} , {'n':'b'} , {'n':'c'} ]"),
         L("[]", "[{'n':'a'},{'n':'b'},{'n':'c'},{'n':'d'}]", "[{'v':1}]", "[{'n':'a'},]", "[{'n':'a'} {'n':'b'}]"));
    lang("{'type': 'array', 'prefixItems': [{'type': 'integer'}, {'type': 'string'}]}", &WS, L("[1, 'a']"),
         L("[1]", "[1, 'a', 2]", "['a', 1]"));
    lang("{'type': 'array', 'prefixItems': [{'type': 'integer'}]}", &LOOSE, L("[1]", "[1, 'x', null]"), L("[]"));
    lang("{'type': 'array', 'items': {'type': 'integer'}, 'maxItems': 2}", &COMPACT, L("[]", "[1]", "[1, 2]"),
         L("[1, 2, 3]", "[1,2]"));
    lang("{'items': {'type': 'boolean'}}", &WS, L("[]", "[true, false]"), L("[1]"));
    lang("{'type': 'array', 'items': false, 'prefixItems': []}", &WS, L("[]", "[ ]"), L("[1]"));
    lang("{'items': {'type': 'integer'}, 'minContains': 2}", &WS, L("[1, 2]"), L("[1]"));
}

static void test_unions(void) {
    lang("{'anyOf': [{'type': 'integer'}, {'type': 'string'}, {'type': 'null'}, {'type': 'array', 'items': "
         "{'type': 'boolean'}}]}",
         &WS, L("1", "'a'", "null", "[true, false]", "[]"), L("1.5", "true", "{}", "[1]"));
    lang("{'type': ['integer', 'null'], 'minimum': 0}", &WS, L("0", "5", "null"), L("-1", "'a'", "1.0"));
    lang("{'type': ['string', 'number']}", &WS, L("'a'", "1.5"), L("null"));
    lang("{'type': 'object', 'properties': {'v': {'oneOf': [{'type': 'string'}, {'type': 'integer'}]}}}", &COMPACT,
         L("{'v': 'x'}", "{'v': 3}", "{}"), L("{'v': {'a': 1}}", "{'v': null}"));
    /* anyOf wins over a sibling type (xgrammar's dispatch order) */
    lang("{'type': 'string', 'anyOf': [{'type': 'integer'}]}", &WS, L("1"), L("'a'"));
    lang("{'allOf': [{'type': 'integer', 'minimum': 1}]}", &WS, L("1", "20"), L("0", "'a'"));
    lang("{'allOf': [{'type': 'integer'}, {'type': 'string'}]}", &WS, L("1", "'a'", "{}"), NULL);
    lang("{'type': 'boolean'}", &WS, L("true", "false"), L("1", "True"));
    lang("{'type': 'null'}", &WS, L("null"), L("0"));
}

/* vLLM's tool_choice=required schema (get_json_schema_from_tools), two tools, one with $defs */
static void test_tool_choice_required(void) {
    const char *s =
        "{'type': 'array', 'minItems': 1, 'items': {'type': 'object', 'anyOf': ["
        "{'properties': {'name': {'type': 'string', 'enum': ['get_weather']}, 'parameters': {'type': 'object', "
        "'properties': {'city': {'type': 'string'}, 'unit': {'$ref': '#/$defs/Unit'}}, 'required': ['city']}}, "
        "'required': ['name', 'parameters']}, "
        "{'properties': {'name': {'type': 'string', 'enum': ['get_time']}, 'parameters': {'type': 'object', "
        "'properties': {}}}, 'required': ['name', 'parameters']}]}, "
        "'$defs': {'Unit': {'type': 'string', 'enum': ['c', 'f']}}}";
    lang(s, &WS,
         L("[{'name': 'get_weather', 'parameters': {'city': 'Paris'}}]",
           "[{'name':'get_time','parameters':{}}, {'name':'get_weather','parameters':{'city':'x','unit':'f'}}]",
           "[\n  {\n    'name': 'get_time',\n    'parameters': {}\n  }\n]"),
         L("[]", "[{'name':'get_weather'}]", "[{'parameters':{},'name':'get_time'}]", "[{'name':'other','parameters':{}}]",
           "[{'name':'get_time','parameters':{'x':1}}]", "[{'name':'get_weather','parameters':{'city':'x','unit':'k'}}]",
           "[{'name':'get_weather','parameters':{'unit':'c'}}]", "{'name':'get_time','parameters':{}}"));
    lang(s, &COMPACT, L("[{'name': 'get_time', 'parameters': {}}, {'name': 'get_weather', 'parameters': {'city': 'a'}}]"),
         L("[{'name':'get_time','parameters':{}}]"));
}

static void test_recursion(void) {
    const char *tree = "{'$ref': '#/$defs/Node', '$defs': {'Node': {'type': 'object', 'properties': {'value': {'type': "
                       "'integer'}, 'children': {'type': 'array', 'items': {'$ref': '#/$defs/Node'}}}, "
                       "'required': ['value']}}}";
    lang(tree, &WS,
         L("{'value':1}", "{'value':1,'children':[]}",
           "{'value':1,'children':[{'value':2,'children':[{'value':3}]},{'value':4,'children':[{'value':5}]}]}"),
         L("{'children':[]}", "{'value':1,'children':[{}]}", "{'value':1,'children':[{'value':'x'}]}"));
    char *g = NULL, *t = dq(tree);
    CHECK_OK(so_json_schema_text_to_ebnf(t, strlen(t), &WS, &g));
    CHECK(g && strstr(g, "\nroot ::= defs_Node\n") && strstr(g, "\nroot_prop_1_additional ::= defs_Node\n") == NULL &&
          strstr(g, "\ndefs_Node_prop_1_additional ::= defs_Node\n"));
    free(g);
    free(t);
    /* the whole schema through "#" */
    lang("{'type': 'object', 'properties': {'name': {'type': 'string'}, 'children': {'type': 'array', 'items': "
         "{'$ref': '#'}}}, 'required': ['name']}",
         &COMPACT, L("{'name': 'r', 'children': [{'name': 'c', 'children': [{'name': 'g'}]}, {'name': 'd'}]}"),
         L("{'children': [{'name': 'c'}]}", "{'name': 'r', 'children': [{}]}"));
    /* a -> b -> a with a way out; definitions and multi-level pointers */
    lang("{'type': 'object', 'properties': {'value': {'$ref': '#/$defs/a'}}, 'required': ['value'], '$defs': {"
         "'a': {'type': 'object', 'properties': {'name': {'type': 'string'}, 'next': {'$ref': '#/$defs/b'}}, "
         "'required': ['name', 'next']}, 'b': {'type': 'object', 'properties': {'id': {'type': 'integer'}, "
         "'child': {'$ref': '#/$defs/a'}}, 'required': ['id']}}}",
         &COMPACT,
         L("{'value': {'name': 'x', 'next': {'id': 1, 'child': {'name': 'y', 'next': {'id': 2}}}}}",
           "{'value': {'name': 'x', 'next': {'id': 1}}}"),
         L("{'value': {'name': 'x', 'next': {'child': {'name': 'y', 'next': {'id': 2}}}}}", "{'value': {'name': 'x'}}"));
    lang("{'type': 'object', 'properties': {'v': {'$ref': '#/definitions/l1/l2/n'}}, 'required': ['v'], "
         "'definitions': {'l1': {'l2': {'n': {'type': 'integer'}}}}}",
         &COMPACT, L("{'v': 3}"), L("{'v': 'x'}"));
    lang("{'$ref': '#/$defs/a~1b', '$defs': {'a/b': {'type': 'null'}}}", &WS, L("null"), L("1"));
    lang("{'$defs': {'a': {'anyOf': [{'$ref': '#/$defs/a'}, {'type': 'null'}]}}, '$ref': '#/$defs/a'}", &WS,
         L("null"), L("1"));
    /* a chain of 60 $defs (d0 -> d1 -> ... -> integer) */
    char buf[8192];
    size_t n = (size_t)snprintf(buf, sizeof buf, "{\"$ref\": \"#/$defs/d0\", \"$defs\": {");
    for (int i = 0; i < 60; i++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "\"d%d\": {\"$ref\": \"#/$defs/d%d\"}, ", i, i + 1);
    n += (size_t)snprintf(buf + n, sizeof buf - n, "\"d60\": {\"type\": \"integer\"}}}");
    so_compiled *c = compile_schema(buf, &WS);
    CHECK(c && accepts(c, "42") && !accepts(c, "\"x\""));
    so_compiled_free(c);
}

static void test_pydantic(void) {
    /* pydantic 2: Person with $defs (a model and a str Enum), titles, descriptions, defaults, bounds, Optional */
    const char *s =
        "{'$defs':{'Address':{'description':'A postal address.','properties':{'street':{'title':'Street','type':"
        "'string'},'city':{'description':'City name','title':'City','type':'string'},'zip':{'anyOf':[{'type':"
        "'string'},{'type':'null'}],'default':null,'title':'Zip'}},'required':['street','city'],'title':'Address',"
        "'type':'object'},'Color':{'enum':['red','green'],'title':'Color','type':'string'}},'properties':{'name':{"
        "'description':'The full name','title':'Full Name','type':'string'},'age':{'maximum':150,'minimum':0,"
        "'title':'Age','type':'integer'},'height':{'default':1.7,'exclusiveMaximum':3,'exclusiveMinimum':0,'title':"
        "'Height','type':'number'},'address':{'$ref':'#/$defs/Address'},'favorite':{'$ref':'#/$defs/Color',"
        "'default':'red'},'tags':{'default':[],'items':{'type':'string'},'title':'Tags','type':'array'},'scores':{"
        "'additionalProperties':{'type':'number'},'default':{},'title':'Scores','type':'object'},'pet':{'anyOf':[{"
        "'const':'cat','type':'string'},{'const':'dog','type':'string'},{'type':'null'}],'default':null,'title':"
        "'Pet'}},'required':['name','age','address'],'title':'Person','type':'object'}";
    lang(s, &COMPACT,
         L("{'name': 'Ann', 'age': 30, 'address': {'street': 'Main', 'city': 'X'}}",
           "{'name': 'Ann', 'age': 150, 'height': 1.85, 'address': {'street': 'M', 'city': 'X', 'zip': null}, "
           "'favorite': 'green', 'tags': ['a'], 'scores': {'m': 1.5, 'n': -2}, 'pet': 'dog'}",
           "{'name': 'Ann', 'age': 0, 'height': 2.999999, 'address': {'street': 'M', 'city': 'X', 'zip': '1'}, 'pet': null}"),
         L("{'name': 'Ann', 'age': 151, 'address': {'street': 'M', 'city': 'X'}}",
           "{'name': 'Ann', 'age': -1, 'address': {'street': 'M', 'city': 'X'}}",
           "{'name': 'Ann', 'age': 1, 'height': 3, 'address': {'street': 'M', 'city': 'X'}}",
           "{'name': 'Ann', 'age': 1, 'height': 0, 'address': {'street': 'M', 'city': 'X'}}",
           "{'name': 'Ann', 'age': 1, 'address': {'street': 'M'}}",
           "{'name': 'Ann', 'age': 1, 'address': {'street': 'M', 'city': 'X'}, 'favorite': 'blue'}",
           "{'name': 'Ann', 'age': 1, 'address': {'street': 'M', 'city': 'X'}, 'pet': 'cow'}",
           "{'age': 1, 'name': 'Ann', 'address': {'street': 'M', 'city': 'X'}}",
           "{'name': 'Ann', 'age': 1, 'address': {'street': 'M', 'city': 'X'}, 'other': 1}"));
    char *g = NULL, *t = dq(s);
    CHECK_OK(so_json_schema_text_to_ebnf(t, strlen(t), &COMPACT, &g));
    CHECK(g && strstr(g, "\ndefs_Color ::= (\"\\\"red\\\"\") | (\"\\\"green\\\"\")\n") &&
          strstr(g, "\nroot_prop_4 ::= defs_Color\n") && strstr(g, "\nroot_prop_3 ::= defs_Address\n"));
    free(g);
    free(t);
}

static void test_enum_const(void) {
    lang("{'enum': ['a', 1, 2.5, true, null, {'k': [1, 'x']}, [1, 2], 'a/b', 'q\\'u', 0.1, 1.0, -0.0]}", &WS,
         L("'a'", "1", "2.5", "true", "null", "{'k':[1,'x']}", "[1,2]", "'a\\/b'", "'q\\'u'", "0.10000000000000001", "-0"),
         L("'b'", "2", "1.0", "false", "{'k': [1, 'x']}", "[1, 2]", "'a/b'", "0.1", "{}", "'A'"));
    lang("{'const': {'x': 1, 'y': 'z\\n'}}", &WS, L("{'x':1,'y':'z\\n'}"), L("{'x': 1,'y':'z\\n'}", "{'y':'z\\n','x':1}"));
    lang("{'type': 'integer', 'enum': [1, 2]}", &WS, L("1", "2"), L("3"));
    lang("{'const': 'caf\xc3\xa9 \\u00e9'}", &WS, L("'caf\xc3\xa9 \xc3\xa9'"), L("'caf\\u00e9 \xc3\xa9'"));
}

static void test_strings(void) {
    lang("{'type': 'string'}", &WS, L("''", "'a\\'b'", "'\\u00e9\\/\\b\\f\\n\\r\\t\\\\'", "'\xe4\xb8\xad'"),
         L("'\t'", "'a\nb'", "'\\x'", "'\\u00g0'", "'a", "a'"));
    lang("{'type': 'string', 'minLength': 2, 'maxLength': 3}", &WS, L("'ab'", "'abc'", "'\xc3\xa9\xe4\xb8\xad'"),
         L("'a'", "'abcd'", "'a\\nb'", "'a\x01'", "'a\nb'", "'a\\'b'"));
    lang("{'type': 'string', 'minLength': 2}", &WS, L("'ab'", "'abcdefgh'"), L("'a'", "''"));
    lang("{'type': 'string', 'maxLength': 1}", &WS, L("''", "'x'"), L("'xy'"));
    lang("{'type': 'string', 'minLength': 0}", &WS, L("''", "'a\\nb'"), NULL);
    /* two properties with the same bounds share one rule */
    char *g = NULL;
    const char *two = "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\", \"maxLength\": 4}, \"b\": "
                      "{\"type\": \"string\", \"maxLength\": 4}}}";
    CHECK_OK(so_json_schema_text_to_ebnf(two, strlen(two), &WS, &g));
    CHECK(g && strstr(g, "\nstring ::= \"\\\"\" [^\\0-\\x1f\\\"\\\\]{0,4} \"\\\"\"\n") && !strstr(g, "string_0") &&
          strstr(g, "\nroot_prop_0 ::= string\n") && strstr(g, "\nroot_prop_1 ::= string\n"));
    free(g);
    /* pattern and format: regexes over the decoded string, written with JSON escapes */
    lang("{'type': 'string', 'pattern': '^[a-c]+x$'}", &WS, L("'abx'", "'ccccx'"), L("'adx'", "'x'", "'abx '"));
    lang("{'type': 'string', 'pattern': 'a.c'}", &WS, L("'abc'", "'a\xc3\xa9\x63'"), L("'a'c'", "'abbc'", "'a\\\\c'"));
    lang("{'type': 'string', 'pattern': 'a\\'b'}", &WS, L("'a\\'b'"), L("'a'b'"));
    lang("{'type': 'string', 'format': 'date'}", &WS, L("'2024-01-31'", "'0000-12-01'"),
         L("'2024-13-01'", "'2024-01-32'", "'24-01-01'"));
    /* an always-valid subset of RFC 3339: no leap second (:60), days per month, February to the 28th */
    lang("{'type': 'string', 'format': 'date-time'}", &WS, L("'2024-01-31T12:30:59Z'", "'2024-01-31T23:59:59.5+01:00'"),
         L("'2024-01-31T12:60:00Z'", "'2024-01-31T12:30:00'", "'2024-01-31T12:30:60Z'", "'2024-04-31T12:30:00Z'",
           "'2024-02-30T12:30:00Z'"));
    lang("{'type': 'string', 'format': 'ipv4'}", &WS, L("'192.168.0.1'", "'0.0.0.0'", "'255.255.255.255'"),
         L("'018.0.0.1'", "'00.1.2.3'", "'256.1.1.1'"));
    lang("{'type': 'string', 'format': 'email'}", &WS,
         L("'a.b@example.com'", "'\\'john..doe\\'@example.org'", "'\\' \\'@example.org'", "'user+tag@x'"),
         L("'a@b@c'", "'abc.example.com'", "'a'b@example.com'"));
    lang("{'type': 'string', 'format': 'ipv4'}", &WS, L("'192.168.0.1'", "'0.0.0.0'"), L("'256.1.1.1'", "'1.1.1'"));
    lang("{'type': 'string', 'format': 'ipv6'}", &WS, L("'::1'", "'2001:db8::8a2e:370:7334'"), L("':::'", "'1.2.3.4'"));
    lang("{'type': 'string', 'format': 'uuid'}", &WS, L("'01234567-89AB-CDEF-abcd-ef0123456789'"),
         L("'01234567-89AB-CDEF-abcd-ef012345678'"));
    lang("{'type': 'string', 'format': 'hostname'}", &WS, L("'www.github.com'", "'a'"), L("'-a'", "'a.'"));
    lang("{'type': 'string', 'format': 'uri'}", &WS, L("'https://x.org/a?b=c#d'", "'abc:'"), L("'//x'", "'a b:'"));
    lang("{'type': 'string', 'format': 'time'}", &WS, L("'12:34:56Z'", "'12:34:56.7-08:09'"), L("'12:34:56'"));
    lang("{'type': 'string', 'format': 'duration'}", &WS, L("'P1Y23M456DT9H87M654S'", "'P3W'"), L("'P'", "'PT'"));
    lang("{'type': 'string', 'format': 'json-pointer'}", &WS, L("''", "'/a~1b/0'", "'/a\\'b'"), L("'a'", "'/~2'"));
    lang("{'type': 'string', 'format': 'uri-template'}", &WS, L("'http://x/{id}{?q,r}'"), L("'{'"));
    lang("{'type': 'string', 'format': 'relative-json-pointer'}", &WS, L("'0#'", "'1/a'"), L("'#'"));
    lang("{'type': 'string', 'format': 'uri-reference'}", &WS, L("''", "'../a?b'", "'//h/p'"), L("'a b'"));
    /* patternProperties / propertyNames: names by regex */
    lang("{'type': 'object', 'patternProperties': {'^[a-z]+$': {'type': 'integer'}}}", &COMPACT,
         L("{}", "{'ab': 1}", "{'ab': 1, 'c': 2}"), L("{'A': 1}", "{'ab': 'x'}", "{'ab':1}"));
    lang("{'type': 'object', 'patternProperties': {'^[a-z]+$': {'type': 'integer'}}, 'minProperties': 1, "
         "'maxProperties': 2}",
         &WS, L("{'a': 1}", "{'a': 1, 'b': 2}"), L("{}", "{'a': 1, 'b': 2, 'c': 3}"));
    lang("{'type': 'object', 'propertyNames': {'pattern': '^[a-z0-9_]+$'}}", &WS, L("{}", "{'a_1': [1], 'b': {}}"),
         L("{'a-b': 1}", "{'': 1}"));
    lang("{'propertyNames': {'enum': ['x', 'y']}, 'additionalProperties': true}", &WS, L("{'x': 1}"), NULL);
}

/* ---- integer and number ranges, value by value ---- */

typedef struct irange {
    const char *schema;
    bool has_lo, has_hi;
    long long lo, hi;
} irange;

static void test_integer_ranges(void) {
    static const irange R[] = {
        {"{'type':'integer','minimum':0,'maximum':10}", true, true, 0, 10},
        {"{'type':'integer','minimum':-5,'maximum':10}", true, true, -5, 10},
        {"{'type':'integer','minimum':-15,'maximum':-10}", true, true, -15, -10},
        {"{'type':'integer','minimum':12,'maximum':16}", true, true, 12, 16},
        {"{'type':'integer','minimum':1,'maximum':9999}", true, true, 1, 9999},
        {"{'type':'integer','minimum':78,'maximum':1278}", true, true, 78, 1278},
        {"{'type':'integer','minimum':2134,'maximum':3459}", true, true, 2134, 3459},
        {"{'type':'integer','minimum':-100,'maximum':100}", true, true, -100, 100},
        {"{'type':'integer','minimum':-1999,'maximum':-100}", true, true, -1999, -100},
        {"{'type':'integer','minimum':5}", true, false, 5, 0},
        {"{'type':'integer','minimum':100}", true, false, 100, 0},
        {"{'type':'integer','minimum':-7}", true, false, -7, 0},
        {"{'type':'integer','minimum':190}", true, false, 190, 0},
        {"{'type':'integer','maximum':0}", false, true, 0, 0},
        {"{'type':'integer','maximum':-123}", false, true, 0, -123},
        {"{'type':'integer','maximum':7}", false, true, 0, 7},
        {"{'type':'integer','maximum':209}", false, true, 0, 209},
        {"{'type':'integer','minimum':0,'maximum':0}", true, true, 0, 0},
        {"{'type':'integer','minimum':-1,'maximum':-1}", true, true, -1, -1},
        {"{'type':'integer','minimum':9,'maximum':10}", true, true, 9, 10},
        {"{'type':'integer','minimum':99,'maximum':100}", true, true, 99, 100},
        {"{'type':'integer','minimum':1000,'maximum':1000}", true, true, 1000, 1000},
        {"{'type':'integer','minimum':101,'maximum':1999}", true, true, 101, 1999},
        {"{'type':'integer','minimum':109,'maximum':990}", true, true, 109, 990},
        {"{'type':'integer','exclusiveMinimum':0,'exclusiveMaximum':10}", true, true, 1, 9},
        {"{'type':'integer','minimum':3,'exclusiveMinimum':5,'maximum':9.0,'exclusiveMaximum':20}", true, true, 6, 9},
        {"{'type':'integer','exclusiveMaximum':-99}", false, true, 0, -100},
    };
    long long extra[] = {1000,  1001,  999,   1277,  1278,  1279,  1998,  1999,  2000,  2001,   2133,    2134,
                         3459,  3460,  9998,  9999,  10000, 10001, 12345, 99999, 100000, 123456789, 9999999999LL};
    for (size_t r = 0; r < sizeof R / sizeof *R; r++) {
        char *s = dq(R[r].schema);
        so_compiled *c = compile_schema(s, &WS);
        CHECK_MSG(c != NULL, "%s", s);
        for (long long v = -2200; c && v <= 2200; v += (v >= -310 && v <= 310) ? 1 : 7) {
            char t[32];
            snprintf(t, sizeof t, "%lld", v);
            const bool want = (!R[r].has_lo || v >= R[r].lo) && (!R[r].has_hi || v <= R[r].hi);
            CHECK_MSG(accepts(c, t) == want, "%s: %s %s", s, t, want ? "refused" : "accepted");
        }
        for (size_t i = 0; c && i < sizeof extra / sizeof *extra; i++)
            for (int sign = -1; sign <= 1; sign += 2) {
                const long long v = sign * extra[i];
                char t[32];
                snprintf(t, sizeof t, "%lld", v);
                const bool want = (!R[r].has_lo || v >= R[r].lo) && (!R[r].has_hi || v <= R[r].hi);
                CHECK_MSG(accepts(c, t) == want, "%s: %s %s", s, t, want ? "refused" : "accepted");
            }
        const char *never[] = {"-0", "01", "007", "1.0", "", "-", "1e2", "+1", " 1"};
        for (size_t i = 0; c && i < sizeof never / sizeof *never; i++)
            CHECK_MSG(!accepts(c, never[i]), "%s: accepted '%s'", s, never[i]);
        so_compiled_free(c);
        free(s);
    }
    lang("{'type': 'integer', 'minimum': -9223372036854775808, 'maximum': 9223372036854775807}", &WS,
         L("-9223372036854775808", "9223372036854775807", "0", "-1"), L("9223372036854775808", "-9223372036854775809"));
    lang("{'type': 'integer', 'exclusiveMinimum': 9223372036854775806}", &WS, L("9223372036854775807", "9223372036854775808"),
         L("9223372036854775806", "-1"));
    lang("{'type': 'integer', 'minimum': 1e3, 'maximum': 1e3}", &WS, L("1000"), L("999", "1001"));
}

typedef struct nrange {
    const char *schema;
    bool has_lo, has_hi, ex_lo, ex_hi;
    long long lo, hi; /* millionths */
} nrange;

static bool in_nrange(const nrange *r, long long v) {
    if (r->has_lo && (r->ex_lo ? v <= r->lo : v < r->lo)) return false;
    if (r->has_hi && (r->ex_hi ? v >= r->hi : v > r->hi)) return false;
    return true;
}

/* the decimal text of v millionths with `digits` decimals (0: none; the value must fit) */
static void fmt_micro(char *t, size_t n, long long v, int digits) {
    const long long a = v < 0 ? -v : v;
    char fr[16];
    snprintf(fr, sizeof fr, "%06lld", a % 1000000);
    fr[digits] = 0;
    snprintf(t, n, "%s%lld%s%s", v < 0 ? "-" : "", a / 1000000, digits ? "." : "", fr);
}

static void test_number_ranges(void) {
    static const nrange R[] = {
        {"{'type':'number','minimum':0}", true, false, false, false, 0, 0},
        {"{'type':'number','maximum':0}", false, true, false, false, 0, 0},
        {"{'type':'number','minimum':-1.5,'maximum':2.25}", true, true, false, false, -1500000, 2250000},
        {"{'type':'number','exclusiveMinimum':0,'exclusiveMaximum':1}", true, true, true, true, 0, 1000000},
        {"{'type':'number','minimum':0.1,'maximum':0.35}", true, true, false, false, 100000, 350000},
        {"{'type':'number','minimum':-0.35,'maximum':-0.1}", true, true, false, false, -350000, -100000},
        {"{'type':'number','minimum':1.05,'maximum':1.5}", true, true, false, false, 1050000, 1500000},
        {"{'type':'number','minimum':12.5}", true, false, false, false, 12500000, 0},
        {"{'type':'number','maximum':-3.125}", false, true, false, false, 0, -3125000},
        {"{'type':'number','exclusiveMinimum':-2,'maximum':0}", true, true, true, false, -2000000, 0},
        {"{'type':'number','minimum':0.000001,'maximum':0.000002}", true, true, false, false, 1, 2},
        {"{'type':'number','minimum':99.99,'maximum':100.01}", true, true, false, false, 99990000, 100010000},
        {"{'type':'number','exclusiveMinimum':-0.5}", true, false, true, false, -500000, 0},
        {"{'type':'number','exclusiveMaximum':2.5}", false, true, false, true, 0, 2500000},
        {"{'type':'number','minimum':-3,'exclusiveMaximum':-2.999999}", true, true, false, true, -3000000, -2999999},
        {"{'type':'number','minimum':7,'maximum':7}", true, true, false, false, 7000000, 7000000},
        {"{'type':'number','minimum':0.0000001,'maximum':0.1234567}", true, true, false, false, 1, 123456},
        {"{'type':'number','minimum':-12.25,'maximum':-12.125}", true, true, false, false, -12250000, -12125000},
        {"{'type':'number','minimum':1.999999,'maximum':10.000001}", true, true, false, false, 1999999, 10000001},
    };
    static const long long deltas[] = {0, 1, 9, 10, 11, 99, 100, 999, 1000, 10000, 49999, 100000, 500000, 1000000};
    for (size_t r = 0; r < sizeof R / sizeof *R; r++) {
        char *s = dq(R[r].schema);
        so_compiled *c = compile_schema(s, &WS);
        CHECK_MSG(c != NULL, "%s", s);
        long long pts[512];
        size_t np = 0;
        for (long long v = -4000000; v <= 4000000; v += 250000) pts[np++] = v;
        for (long long v = -1000000; v <= 1000000; v += 31250) pts[np++] = v;
        const long long bounds[] = {R[r].lo, R[r].hi};
        for (int b = 0; b < 2; b++)
            for (size_t i = 0; i < sizeof deltas / sizeof *deltas; i++) {
                pts[np++] = bounds[b] + deltas[i];
                pts[np++] = bounds[b] - deltas[i];
            }
        for (size_t i = 0; c && i < np; i++) {
            const long long v = pts[i];
            long long a = v < 0 ? -v : v;
            int minimal = 6; /* fewest decimals that hold v */
            while (minimal > 0 && a % 10 == 0) a /= 10, minimal--;
            for (int digits = minimal; digits <= 6; digits++) {
                if (v == 0 && digits == 0) continue;
                char t[48];
                fmt_micro(t, sizeof t, v, digits);
                const bool want = in_nrange(&R[r], v);
                CHECK_MSG(accepts(c, t) == want, "%s: %s %s", s, t, want ? "refused" : "accepted");
            }
        }
        const bool zero = in_nrange(&R[r], 0);
        CHECK_MSG(accepts(c, "0") == zero && accepts(c, "0.0") == zero && accepts(c, "0.000000") == zero, "%s: 0", s);
        const char *never[] = {"-0", "-0.0", "1e5", "1.", "-1.", "2.", "-0.", "0.", ".5", "01.5", "0.0000001", "-", "",
                               "1.0000000", "00", "-1.5.", "1..5"};
        for (size_t i = 0; c && i < sizeof never / sizeof *never; i++)
            CHECK_MSG(!accepts(c, never[i]), "%s: accepted '%s'", s, never[i]);
        so_compiled_free(c);
        free(s);
    }
    /* a bound of 301 digits */
    char big[3][320];
    memset(big, 0, sizeof big);
    big[0][0] = '1', big[1][0] = '9', big[2][0] = '2';
    memset(big[0] + 1, '0', 300), memset(big[1] + 1, '0', 299), memset(big[2] + 1, '0', 300);
    char *bigh = NULL;
    so_compiled *c = compile_schema("{\"type\": \"number\", \"minimum\": 1e300}", &WS);
    CHECK(c && accepts(c, big[0]) && accepts(c, big[2]) && !accepts(c, big[1]) && !accepts(c, "1e301"));
    if (c && (bigh = malloc(330))) {
        snprintf(bigh, 330, "%s.25", big[0]);
        CHECK(accepts(c, bigh));
        snprintf(bigh, 330, "-%s", big[0]);
        CHECK(!accepts(c, bigh));
    }
    free(bigh);
    so_compiled_free(c);
    lang("{'type': 'number', 'maximum': -5e-7}", &WS, L("-0.000001", "-3"), L("-0.0000005", "0"));
    lang("{'type': 'number'}", &WS, L("0", "-0", "1.5", "-2.5E+10", "1e5"), L("01", "1.", "+1", ".5"));
}

/* ---- minProperties / maxProperties (xgrammar's test_object_with_property_numbers, value by value) ---- */

static void test_property_counts(void) {
    static const struct {
        const char *text;
        int n;
        bool addl;
    } inst[] = {
        {"{}", 0, false},
        {"{'key1': 'v'}", 1, false},
        {"{'key4': 'v'}", 1, false},
        {"{'x': 'v'}", 1, true},
        {"{'key1': 'v', 'x': 'v'}", 2, true},
        {"{'key1': 'v', 'key2': 'v'}", 2, false},
        {"{'key1': 'v', 'key4': 'v'}", 2, false},
        {"{'key2': 'v', 'key3': 'v'}", 2, false},
        {"{'key1': 'v', 'key2': 'v', 'x': 'v'}", 3, true},
        {"{'key3': 'v', 'key4': 'v', 'x': 'v'}", 3, true},
        {"{'key1': 'v', 'key2': 'v', 'key3': 'v'}", 3, false},
        {"{'key2': 'v', 'key3': 'v', 'key4': 'v'}", 3, false},
        {"{'key1': 'v', 'key2': 'v', 'key3': 'v', 'x': 'v'}", 4, true},
        {"{'key1': 'v', 'key2': 'v', 'key3': 'v', 'key4': 'v'}", 4, false},
        {"{'key1': 'v', 'key2': 'v', 'key3': 'v', 'key4': 'v', 'x': 'v'}", 5, true},
        {"{'x': 'v', 'y': 'v'}", 2, true},
        {"{'key1': 'v', 'key2': 'v', 'x': 'v', 'y': 'v'}", 4, true},
        {"{'key1': 'v', 'key2': 'v', 'key3': 'v', 'key4': 'v', 'x': 'v', 'y': 'v'}", 6, true},
        {"{'x': 'v', 'y': 'v', 'z': 'v'}", 3, true},
    };
    static const char *const reqs[] = {"[]", "['key1']", "['key3', 'key4']", "['key2']"};
    static const bool has[][4] = {{0, 0, 0, 0}, {1, 0, 0, 0}, {0, 0, 1, 1}, {0, 1, 0, 0}};
    for (int addl = 0; addl < 2; addl++)
        for (size_t q = 0; q < sizeof reqs / sizeof *reqs; q++)
            for (int lo = 0; lo <= 5; lo++)
                for (int hi = -1; hi <= 6; hi++) {
                    if (hi >= 0 && hi < lo) continue;
                    const int n_req = q == 2 ? 2 : q ? 1 : 0;
                    char sch[512], maxp[32] = "";
                    if (hi >= 0) snprintf(maxp, sizeof maxp, ", \"maxProperties\": %d", hi);
                    snprintf(sch, sizeof sch,
                             "{\"properties\": {\"key1\": {\"type\": \"string\"}, \"key2\": {\"type\": \"string\"}, "
                             "\"key3\": {\"type\": \"string\"}, \"key4\": {\"type\": \"string\"}}, \"required\": %s, "
                             "\"minProperties\": %d%s%s}",
                             reqs[q], lo, maxp, addl ? ", \"additionalProperties\": {\"type\": \"string\"}" : "");
                    for (char *p = sch; *p; p++)
                        if (*p == '\'') *p = '"';
                    if ((!addl && lo > 4) || (hi >= 0 && hi < n_req)) {
                        char *out = NULL;
                        CHECK_MSG(so_json_schema_text_to_ebnf(sch, strlen(sch), &COMPACT, &out) == VLLM_ERR_INVALID_ARG,
                                  "%s converted", sch);
                        free(out);
                        continue;
                    }
                    so_compiled *c = compile_schema(sch, &COMPACT);
                    CHECK_MSG(c != NULL, "%s", sch);
                    for (size_t i = 0; c && i < sizeof inst / sizeof *inst; i++) {
                        char *t = dq(inst[i].text);
                        bool want = inst[i].n >= lo && (hi < 0 || inst[i].n <= hi) && (addl || !inst[i].addl);
                        for (int k = 0; k < 4; k++) {
                            char key[16];
                            snprintf(key, sizeof key, "key%d", k + 1);
                            if (has[q][k] && !strstr(t, key)) want = false;
                        }
                        CHECK_MSG(accepts(c, t) == want, "%s: %s %s", sch, t, want ? "refused" : "accepted");
                        free(t);
                    }
                    so_compiled_free(c);
                }
    /* only other properties, counted */
    lang("{'type': 'object', 'additionalProperties': {'type': 'integer'}, 'minProperties': 2, 'maxProperties': 3}",
         &WS, L("{'a': 1, 'b': 2}", "{'a': 1, 'b': 2, 'c': 3}"), L("{}", "{'a': 1}", "{'a': 1, 'b': 2, 'c': 3, 'd': 4}"));
    lang("{'type': 'object', 'properties': {'a': {'type': 'integer'}}, 'maxProperties': 0}", &WS, L("{}", "{ }"),
         L("{'a': 1}"));
}

/* ---- refusals ---- */

static void test_refusals(void) {
    /* vLLM's checks before xgrammar */
    const char *vllm[] = {
        "{'type': 'integer', 'multipleOf': 2}",
        "{'type': ['number', 'null'], 'multipleOf': 0.5}",
        "{'type': 'array', 'uniqueItems': true}",
        "{'type': 'array', 'contains': {'type': 'integer'}}",
        "{'type': 'array', 'maxContains': 2}",
        "{'type': 'string', 'format': 'color'}",
        "{'type': 'string', 'pattern': 'a+', 'maxLength': 3}",
        "{'type': 'string', 'format': 'date', 'minLength': 3}",
        "{'type': 'object', 'propertyNames': {'pattern': 'a'}, 'properties': {}}",
        "{'type': 'object', 'propertyNames': {'pattern': 'a'}, 'unevaluatedProperties': false}",
        "{'type': 'object', 'propertyNames': {'pattern': 'a', 'maxLength': 2}}",
        "{'type': 'object', 'patternProperties': {'a': {}, 'b': {}}}",
        "{'type': 'object', 'patternProperties': {'a': {}}, 'properties': {}}",
        "{'type': 'object', 'properties': {'x': {'type': 'array', 'items': {'type': 'integer', 'multipleOf': 3}}}}",
        "{'anyOf': [{'type': 'string', 'format': 'phone'}]}",
        "{'$defs': {'unused': {'type': 'integer', 'multipleOf': 3}}, 'type': 'integer'}",
    };
    for (size_t i = 0; i < sizeof vllm / sizeof *vllm; i++) refused(vllm[i], &WS, UNSUPPORTED, UNSUPPORTED);
    /* $ref cycles with no base case (vLLM's has_non_terminating_ref_cycle) */
    refused("{'$ref': '#'}", &WS, "'$ref' cycle with no base case", "terminating branch");
    refused("{'$ref': '#/$defs/a', '$defs': {'a': {'$ref': '#/$defs/b'}, 'b': {'$ref': '#/$defs/a'}}}", &WS,
            "'$ref' cycle", "");
    refused("{'anyOf': [{'$ref': '#'}, {'$ref': '#/$defs/a'}], '$defs': {'a': {'oneOf': [{'$ref': '#'}]}}}", &WS,
            "'$ref' cycle", "");
    /* xgrammar's errors */
    static const struct {
        const char *schema, *msg;
    } x[] = {
        {"{'type': 'array', 'prefixItems': {'type': 'string'}}", "prefixItems must be an array"},
        {"{'type': 'array', 'prefixItems': ['not an object']}", "prefixItems must be an array of objects or booleans"},
        {"{'type': 'array', 'prefixItems': [false]}", "prefixItems contains false"},
        {"{'type': 'array', 'items': 'not an object'}", "items must be a boolean or an object"},
        {"{'type': 'array', 'unevaluatedItems': 'not an object'}", "unevaluatedItems must be a boolean or an object"},
        {"{'type': 'array', 'minItems': 'not an integer'}", "minItems must be an integer"},
        {"{'type': 'array', 'maxItems': -1}", "maxItems must be a non-negative integer"},
        {"{'type': 'array', 'minItems': 5, 'maxItems': 3}", "minItems is greater than maxItems: 5 > 3"},
        {"{'type': 'array', 'prefixItems': [{}, {}, {}], 'maxItems': 2}",
         "maxItems is less than the number of prefixItems: 2 < 3"},
        {"{'type': 'array', 'prefixItems': [{}, {}], 'minItems': 3, 'items': false}",
         "minItems is greater than the number of prefixItems, but additional items are not allowed: 3 > 2"},
        {"{'type': 'array', 'minItems': 1}",
         "minItems is greater than the number of prefixItems, but additional items are not allowed: 1 > 0"},
        {"{'type': 'object', 'properties': 'not an object'}", "properties must be an object"},
        {"{'type': 'object', 'required': {'key': 'not an array'}}", "required must be an array"},
        {"{'type': 'object', 'patternProperties': ['not an object']}", "patternProperties must be an object"},
        {"{'type': 'object', 'propertyNames': 'not an object'}", "propertyNames must be an object"},
        {"{'type': 'object', 'propertyNames': {'type': 'object'}}", "propertyNames must be an object that validates string"},
        {"{'type': 'object', 'propertyNames': {'enum': ['a', 1]}}", "propertyNames must be an object that validates string"},
        {"{'type': 'object', 'minProperties': 'not an integer'}", "minProperties must be an integer"},
        {"{'type': 'object', 'maxProperties': 'not an integer'}", "maxProperties must be an integer"},
        {"{'type': 'object', 'minProperties': -1}", "minProperties must be a non-negative integer"},
        {"{'type': 'object', 'maxProperties': -1}", "maxProperties must be a non-negative integer"},
        {"{'type': 'object', 'minProperties': 5, 'maxProperties': 3}", "minProperties is greater than maxProperties: 5 > 3"},
        {"{'type': 'object', 'maxProperties': 1, 'required': ['key1', 'key2']}",
         "maxProperties is less than the number of required properties: 1 < 2"},
        {"{'type': 'object', 'additionalProperties': false, 'properties': {'key': {'type': 'string'}}, "
         "'minProperties': 2}",
         "minProperties is greater than the number of properties, but additional properties aren't allowed: 2 > 1"},
        {"false", "Schema 'false' cannot accept any value"},
        {"{'type': 'object', 'properties': {'a': false}, 'required': ['a']}", "Schema 'false' cannot accept any value"},
        {"{'type': 'object', 'properties': {'a': 5}}", "Schema should be an object or bool, but got 5"},
        {"{'type': 'foo'}", "Unsupported type \"foo\""},
        {"{'type': 5}", "Type should be a string"},
        {"{'type': ['string', 5]}", "type must be a string or an array of strings"},
        {"{'type': 'string', 'minLength': 3, 'maxLength': 2}", "minLength 3 is greater than maxLength 2"},
        {"{'type': 'string', 'minLength': 'a'}", "minLength must be an integer"},
        {"{'type': 'integer', 'minimum': 5, 'maximum': 1}", "Invalid range: minimum greater than maximum"},
        {"{'type': 'integer', 'exclusiveMinimum': 1, 'exclusiveMaximum': 2}", "Invalid range: minimum greater than maximum"},
        {"{'type': 'integer', 'minimum': 1.5}", "Integer constraint must be a whole number"},
        {"{'type': 'integer', 'maximum': 1e300}", "Integer exceeds maximum limit"},
        {"{'type': 'integer', 'minimum': -9223372036854775808.0}",
         "Integer exceeds minimum limit due to precision loss at 64-bit boundary"},
        {"{'type': 'integer', 'minimum': 'a'}", "Value must be a number"},
        {"{'type': 'integer', 'exclusiveMinimum': 9223372036854775807}", "exclusiveMinimum would cause integer overflow"},
        {"{'type': 'number', 'minimum': true}", "minimum must be a number"},
        {"{'type': 'number', 'minimum': 2, 'exclusiveMaximum': 2}", "Invalid range: empty range"},
        {"{'type': 'number', 'exclusiveMinimum': 0, 'exclusiveMaximum': 0.0000005}", "Invalid range: empty range"},
        {"{'type': 'number', 'minimum': 3, 'maximum': 2}", "Invalid range: empty range"},
        {"{'$ref': '#/$defs/missing', '$defs': {}}", "Cannot find field missing in #/$defs/missing"},
        {"{'$ref': 5}", "$ref must be a string"},
        {"{'enum': []}", "enum array must not be empty"},
        {"{'enum': 'a'}", "enum must be an array"},
        {"{'anyOf': {}}", "anyOf must be an array"},
        {"{'oneOf': []}", "oneOf must not be empty"},
        {"{'allOf': 1}", "allOf must be an array"},
        {"{'type': 'string', 'pattern': '(?=a)b'}", "regex"},
        {"{'type': 'string', 'pattern': 5}", "pattern must be a string"},
        {"{'type': 'object', 'patternProperties': {'(a': {}}}", "regex"},
        {"{'type': 'array', 'items': {'type': 'integer'}, 'maxItems': 1000000000}", "not supported"},
    };
    for (size_t i = 0; i < sizeof x / sizeof *x; i++) refused(x[i].schema, &WS, FAILED, x[i].msg);
    /* not JSON */
    char *out = NULL;
    EXPECT_ERR(so_json_schema_text_to_ebnf("{\"type\": ", 9, &WS, &out), VLLM_ERR_INVALID_ARG,
               "Invalid JSON grammar specification.", "");
    EXPECT_ERR(so_json_schema_text_to_ebnf(NULL, 0, &WS, &out), VLLM_ERR_INVALID_ARG, "Invalid JSON", "");
    EXPECT_ERR(so_json_schema_to_ebnf(NULL, &WS, &out), VLLM_ERR_INVALID_ARG, "schema", "");
    CHECK(out == NULL);
    /* unknown keywords are ignored; a $ref that is not local is any value (xgrammar warns) */
    lang("{'type': 'integer', 'x-extra': {'a': 1}, 'not': {'type': 'string'}}", &WS, L("1"), L("'a'"));
    lang("{'$ref': 'https://example.com/s.json'}", &WS, L("1", "'a'"), NULL);
}

/* ---- bounded work ---- */

static char *nested(const char *open, const char *leaf, const char *close, int depth) {
    const size_t lo = strlen(open), ll = strlen(leaf), lc = strlen(close);
    char *s = malloc((lo + lc) * (size_t)depth + ll + 1);
    if (!s) return NULL;
    char *p = s;
    for (int i = 0; i < depth; i++) memcpy(p, open, lo), p += lo;
    memcpy(p, leaf, ll), p += ll;
    for (int i = 0; i < depth; i++) memcpy(p, close, lc), p += lc;
    *p = 0;
    return s;
}

static void test_limits(void) {
    /* schema nesting: 100 arrays deep converts, 200 is refused */
    char *s = nested("{\"type\": \"array\", \"items\": ", "{\"type\": \"integer\"}", "}", 100);
    char *g = s ? to_ebnf(s, &WS) : NULL;
    CHECK(g != NULL);
    free(g);
    free(s);
    s = nested("{\"type\": \"array\", \"items\": ", "{\"type\": \"integer\"}", "}", 200);
    g = NULL;
    if (s) EXPECT_ERR(so_json_schema_text_to_ebnf(s, strlen(s), &WS, &g), VLLM_ERR_INVALID_ARG, FAILED, "deeper than 128");
    free(s);
    /* document nesting (a const 600 arrays deep) */
    s = nested("[", "{\"const\": 1}", "]", 600);
    if (s) EXPECT_ERR(so_json_schema_text_to_ebnf(s, strlen(s), &WS, &g), VLLM_ERR_INVALID_ARG, FAILED, "deeper than 512");
    free(s);
    /* a $ref chain of 300 is too deep */
    char *buf = malloc(65536);
    if (buf) {
        size_t n = (size_t)snprintf(buf, 65536, "{\"$ref\": \"#/$defs/d0\", \"$defs\": {");
        for (int i = 0; i < 300; i++)
            n += (size_t)snprintf(buf + n, 65536 - n, "\"d%d\": {\"anyOf\": [{\"$ref\": \"#/$defs/d%d\"}]}, ", i, i + 1);
        n += (size_t)snprintf(buf + n, 65536 - n, "\"d300\": {\"type\": \"integer\"}}}");
        EXPECT_ERR(so_json_schema_text_to_ebnf(buf, n, &WS, &g), VLLM_ERR_INVALID_ARG, FAILED, "deeper than 128");
        free(buf);
    }
    CHECK(g == NULL);

    /* 10,000 properties (every third required) convert in well under a second */
    json_t *props = json_object(), *req = json_array(), *root = json_object();
    static const char *const types[] = {"string", "integer", "number", "boolean"};
    for (int i = 0; i < 10000; i++) {
        char k[32];
        snprintf(k, sizeof k, "field_%d", i);
        json_t *p = json_object();
        json_object_set_new(p, "type", json_string(types[i % 4]));
        json_object_set_new(p, "title", json_string(k));
        json_object_set_new(props, k, p);
        if (i % 3 == 0) json_array_append_new(req, json_string(k));
    }
    json_object_set_new(root, "type", json_string("object"));
    json_object_set_new(root, "properties", props);
    json_object_set_new(root, "required", req);
    clock_t t0 = clock();
    CHECK_OK(so_json_schema_to_ebnf(root, &WS, &g));
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    CHECK_MSG(secs < 1.0, "10,000 properties took %.2f s", secs);
    CHECK(g && strstr(g, "\nroot_part_9998 ::= ") && strstr(g, "\"\\\"field_9999\\\"\""));
    free(g);
    g = NULL;
    /* with counts: 10,000 x maxProperties 3 rules is fine, x 100 is refused */
    json_object_set_new(root, "maxProperties", json_integer(3400));
    EXPECT_ERR(so_json_schema_to_ebnf(root, &WS, &g), VLLM_ERR_INVALID_ARG, FAILED, "grammar rules");
    json_object_set_new(root, "maxProperties", json_integer(3334));
    json_object_set_new(root, "required", json_array());
    json_object_set_new(root, "maxProperties", json_integer(3));
    t0 = clock();
    CHECK_OK(so_json_schema_to_ebnf(root, &WS, &g));
    secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    CHECK_MSG(secs < 2.0, "10,000 counted properties took %.2f s", secs);
    free(g);
    g = NULL;
    json_decref(root);

    /* 1,000 properties: the grammar compiles and matches */
    props = json_object();
    {
        char *inst = malloc(64 * 1000);
        size_t n = 0;
        if (inst) inst[n++] = '{';
        for (int i = 0; i < 1000; i++) {
            char k[32];
            snprintf(k, sizeof k, "k%d", i);
            json_object_set_new(props, k, json_pack("{s:s}", "type", "integer"));
            if (inst) n += (size_t)snprintf(inst + n, 64, "%s\"k%d\": %d", i ? ", " : "", i, i);
        }
        if (inst) inst[n++] = '}', inst[n] = 0;
        root = json_pack("{s:s, s:o}", "type", "object", "properties", props);
        CHECK_OK(so_json_schema_to_ebnf(root, &COMPACT, &g));
        so_compiled *c = g ? compile_text(g) : NULL;
        CHECK(c && accepts(c, "{\"k5\": 1, \"k999\": 2}") && !accepts(c, "{\"k5\": 1, \"k4\": 2}"));
        so_compiled_free(c);
        free(g);
        g = NULL;
        /* all required: the whole instance */
        json_t *all = json_array();
        for (int i = 0; i < 1000; i++) json_array_append_new(all, json_sprintf("k%d", i));
        json_object_set_new(root, "required", all);
        CHECK_OK(so_json_schema_to_ebnf(root, &COMPACT, &g));
        c = g ? compile_text(g) : NULL;
        CHECK(c && inst && accepts(c, inst) && !accepts(c, "{\"k0\": 0}"));
        so_compiled_free(c);
        free(inst);
        free(g);
        g = NULL;
        json_decref(root);
    }
    /* an enum of 10,000 strings */
    json_t *e = json_array();
    for (int i = 0; i < 10000; i++) {
        char v[32];
        snprintf(v, sizeof v, "value %d", i);
        json_array_append_new(e, json_string(v));
    }
    root = json_pack("{s:o}", "enum", e);
    t0 = clock();
    CHECK_OK(so_json_schema_to_ebnf(root, &WS, &g));
    CHECK_MSG((double)(clock() - t0) / CLOCKS_PER_SEC < 1.0, "enum of 10,000");
    free(g);
    json_decref(root);
}

#define RUN(f)                                                                                             \
    do {                                                                                                   \
        clock_t t_ = clock();                                                                              \
        f();                                                                                               \
        if (getenv("SO_TEST_TIMES")) fprintf(stderr, "%s %.2f s\n", #f, (double)(clock() - t_) / CLOCKS_PER_SEC); \
    } while (0)

int main(void) {
    RUN(test_exact);
    RUN(test_json_object);
    RUN(test_objects);
    RUN(test_compact);
    RUN(test_arrays);
    RUN(test_unions);
    RUN(test_tool_choice_required);
    RUN(test_recursion);
    RUN(test_pydantic);
    RUN(test_enum_const);
    RUN(test_strings);
    RUN(test_integer_ranges);
    RUN(test_number_ranges);
    RUN(test_property_counts);
    RUN(test_refusals);
    RUN(test_limits);
    printf("%d checks, %d failures\n", t_checks, t_failures);
    return t_failures || !t_checks;
}
