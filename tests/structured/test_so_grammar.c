/*
 * test_so_grammar.c: the structured-output grammar IR's EBNF reader and printer (src/structured/so_grammar.h):
 * xgrammar 0.1.29's JSON basic rules (its json_schema_converter test's basic_json_rules_ebnf, the dialect's
 * densest use: negated classes with \0 and \x1f, lookaheads, nested groups and repeats) read and printed back to
 * a fixed point; exact prints of small grammars (escapes, UTF-8, {n,m}, multi-line rules); errors with
 * xgrammar's wording and place.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "structured/so_grammar.h"
#include "test.h"

static so_grammar *parse(const char *text, const char *root) {
    so_grammar *g = NULL;
    vllm_status st = so_ebnf_parse(text, strlen(text), root, &g);
    CHECK_MSG(st == VLLM_OK, "parse: %s", vllm_last_error());
    return g;
}

/* text prints as want, and want reads back to the same print */
static void check_print(const char *text, const char *root, const char *want) {
    so_grammar *g = parse(text, root);
    if (!g) return;
    char *s = so_grammar_print(g);
    CHECK_MSG(s && !strcmp(s, want), "printed:\n%s\nwant:\n%s", s ? s : "(null)", want);
    so_grammar *g2 = s ? parse(s, root) : NULL;
    char *s2 = g2 ? so_grammar_print(g2) : NULL;
    CHECK_MSG(s2 && s && !strcmp(s, s2), "not a fixed point:\n%s\nthen\n%s", s ? s : "", s2 ? s2 : "(null)");
    free(s);
    free(s2);
    so_grammar_free(g);
    so_grammar_free(g2);
}

static void check_error(const char *text, vllm_status want, const char *msg) {
    so_grammar *g = NULL;
    vllm_status st = so_ebnf_parse(text, strlen(text), NULL, &g);
    CHECK_MSG(st == want && !g, "'%s': status %d", text, (int)st);
    CHECK_MSG(strstr(vllm_last_error(), msg) != NULL, "'%s': error '%s', want '%s'", text, vllm_last_error(), msg);
    so_grammar_free(g);
}

static const char *JSON_BASIC =
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape "
    "basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_integer ::= (\"0\" | \"-\"? [1-9] [0-9]*)\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"]\") | "
    "(\"[\" [ \\n\\t]* \"]\"))\n"
    "basic_object ::= (\"{\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" "
    "[ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"}\") | \"{\" [ \\n\\t]* \"}\"\n"
    "root ::= basic_object\n";

static void test_json_basic(void) {
    so_grammar *g = parse(JSON_BASIC, NULL);
    if (!g) return;
    CHECK(g->n_rules == 11 && g->root == 10 && !strcmp(g->rules[g->root].name, "root"));
    /* basic_string_sub: a choice of three, a lookahead [ \n\t]* [,}\]:] */
    const so_rule *r = &g->rules[1];
    CHECK(r->body->kind == SO_CHOICE && r->body->n_kids == 3 && r->lookahead && r->lookahead->kind == SO_SEQ);
    const so_expr *neg = r->body->kids[1]->kids[0];
    CHECK(neg->kind == SO_CLASS && neg->negated && neg->n_ranges == 5 && neg->ranges[0] == 0 && neg->ranges[1] == 0x1f &&
          neg->ranges[2] == '"' && neg->ranges[4] == '\\' && neg->ranges[6] == '\r' && neg->ranges[8] == '\n');
    const so_expr *la = r->lookahead->kids[1];
    CHECK(la->kind == SO_CLASS && la->n_ranges == 4 && la->ranges[4] == ']');
    /* basic_array: ( ... )* inside, references resolved to rule indices */
    const so_expr *ref = g->rules[2].body->kids[5];
    CHECK(ref->kind == SO_REF && ref->rule == 9);
    so_grammar_free(g);
    char *s = NULL;
    g = parse(JSON_BASIC, NULL);
    if (g) s = so_grammar_print(g);
    if (s) check_print(s, NULL, s); /* the print reads back to itself */
    free(s);
    so_grammar_free(g);
}

static void test_prints(void) {
    check_print("root ::= \"ab\" [a-c]* (\"x\" | y){2,} \"\\u00e9\\t\" [^\\0-\\x1f\\]\\-] z?\n"
                "y ::= \"\" | \"q\"{3} | \"r\"{1,4} ((\"s\"))+\n"
                "z ::= [\\xe9\\u4e2d-\\U0001F600]\n",
                NULL,
                "root ::= \"ab\" [a-c]* (\"x\" | y){2,} \"\xc3\xa9\\t\" [^\\x00-\\x1f\\]\\-] z?\n"
                "y ::= \"\" | \"q\"{3} | \"r\"{1,4} \"s\"+\n"
                "z ::= [\xc3\xa9\xe4\xb8\xad-\xf0\x9f\x98\x80]\n");
    /* rules over several lines: after ::=, |, inside ( ); comments; another root; a lookahead */
    check_print("# comment\n\nstart ::=\n  \"a\" |\n  ( \"b\"\n    \"c\" ) # tail\nother ::= \"x\" (= \"y\" | [z])\n",
                "start", "start ::= \"a\" | \"b\" \"c\"\nother ::= \"x\" (= \"y\" | [z])\n");
    check_print("root ::= \"a\" (\"b\" \"c\")* ((\"d\")?)+\n", NULL, "root ::= \"a\" (\"b\" \"c\")* (\"d\"?)+\n");
}

static void test_errors(void) {
    check_error("root ::= foo\n", VLLM_ERR_INVALID_ARG, "Rule \"foo\" is not defined");
    check_error("root ::= \"a\"\nroot ::= \"b\"\n", VLLM_ERR_INVALID_ARG,
                "line 2, column 1: Rule \"root\" is defined multiple times");
    check_error("a ::= \"a\"\n", VLLM_ERR_INVALID_ARG, "The root rule with name \"root\" is not found");
    check_error("root ::= \"a\\q\"\n", VLLM_ERR_INVALID_ARG, "line 1, column 12: invalid escape sequence \\q");
    check_error("root ::= \"abc\n", VLLM_ERR_INVALID_ARG, "string literal should not contain newline");
    check_error("root ::= \"abc", VLLM_ERR_INVALID_ARG, "unterminated string literal");
    check_error("root ::= [a-", VLLM_ERR_INVALID_ARG, "unterminated character class");
    check_error("root ::= [z-a]\n", VLLM_ERR_INVALID_ARG, "lower bound is larger than upper bound");
    check_error("root ::= \"a\"{,3}\n", VLLM_ERR_INVALID_ARG, "repetition range should have a lower bound");
    check_error("root ::= \"a\"{3,1}\n", VLLM_ERR_INVALID_ARG, "upper bound is below the lower");
    check_error("root ::= (\"a\"\n", VLLM_ERR_INVALID_ARG, "expected ')'");
    check_error("root ::= \"a\" )\n", VLLM_ERR_INVALID_ARG, "expected the end of the rule");
    check_error("root \"a\"\n", VLLM_ERR_INVALID_ARG, "expected ::=");
    check_error("root ::= \"\\x4\"\n", VLLM_ERR_INVALID_ARG, "2 hexadecimal digits expected");
    check_error("root ::= \"\\uD800\"\n", VLLM_ERR_INVALID_ARG, "invalid code point U+D800");
    check_error("root ::= \"a\" ((= \"b\"))\n", VLLM_ERR_INVALID_ARG, "only allowed at the end of a rule");
    check_error("root ::= (= \"a\")\n", VLLM_ERR_INVALID_ARG, "line 1, column 10: the rule's body is empty");
    check_error("root ::=\n", VLLM_ERR_INVALID_ARG, "the rule's body is empty");
    check_error("root ::= \"\xff\"\n", VLLM_ERR_INVALID_ARG, "invalid UTF-8");
    check_error("", VLLM_ERR_INVALID_ARG, "The root rule with name \"root\" is not found");
    check_error("root ::= \"a\"?????????\n", VLLM_ERR_INVALID_ARG, "more than 8 repetition operators");
    /* what a request could use to exhaust the stack or the time: deep nesting, many rules */
    const size_t deep = 100000;
    char *t = malloc(2 * deep + 32);
    if (t) {
        size_t o = (size_t)sprintf(t, "root ::= ");
        for (size_t i = 0; i < deep; i++) t[o++] = '(';
        o += (size_t)sprintf(t + o, "\"a\"");
        for (size_t i = 0; i < deep; i++) t[o++] = ')';
        t[o] = 0;
        check_error(t, VLLM_ERR_INVALID_ARG, "parentheses nested deeper than 256");
        free(t);
    }
    char *many = malloc(5000 * 24 + 32);
    if (many) {
        size_t o = (size_t)sprintf(many, "root ::= r0\n");
        for (int i = 0; i < 5000; i++) o += (size_t)sprintf(many + o, "r%d ::= \"x\"\n", i);
        check_error(many, VLLM_ERR_INVALID_ARG, "more than 4096 rules");
        free(many);
    }
}

int main(void) {
    test_json_basic();
    test_prints();
    test_errors();
    TEST_END();
}
