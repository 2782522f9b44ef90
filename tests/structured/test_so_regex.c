/*
 * test_so_regex.c: regular expressions to EBNF (src/structured/so_regex.h): xgrammar 0.1.29's regex converter tests
 * (escapes, classes, groups, quantifiers, empty groups and alternatives, date / time / email / IPv4), its JSON-schema
 * format regexes, real-world patterns, the json_string escapes, every refusal with its message and offset, the
 * bounds; languages checked by compiling `root ::= <expr>` and matching whole strings, a differential run against
 * Oniguruma (the tokenizer's regex engine), and random regexes whose every accepted conversion must read as EBNF.
 */
#include <oniguruma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "structured/so_grammar.h"
#include "structured/so_match.h"
#include "structured/so_regex.h"
#include "test.h"

/* the EBNF of re (NULL, with a failed check, when refused) */
static char *conv(const char *re, bool json) {
    char *e = NULL;
    const vllm_status st = so_regex_to_ebnf(re, strlen(re), json, &e);
    CHECK_MSG(st == VLLM_OK && e, "'%s' (json %d): %s", re, json, vllm_last_error());
    return e;
}

/* `root ::= <ebnf>` compiled, NULL (with a failed check when `must`) when it does not */
static so_compiled *compile_ebnf(const char *ebnf, const char *re, bool must) {
    const size_t n = strlen(ebnf) + 16;
    char *text = malloc(n);
    if (!text) return NULL;
    snprintf(text, n, "root ::= %s\n", ebnf);
    so_grammar *g = NULL;
    so_compiled *c = NULL;
    vllm_status st = so_ebnf_parse(text, strlen(text), NULL, &g);
    if (st == VLLM_OK) st = so_compile(g, &c);
    if (must) CHECK_MSG(st == VLLM_OK, "'%s' -> %s: %s", re, ebnf, vllm_last_error());
    so_grammar_free(g);
    free(text);
    return c;
}

static so_compiled *compile_re(const char *re, bool json) {
    char *e = conv(re, json);
    so_compiled *c = e ? compile_ebnf(e, re, true) : NULL;
    free(e);
    return c;
}

/* whether n bytes of s are a sentence (at once and byte by byte, the same answer) */
static bool accepts_n(const so_compiled *c, const char *s, size_t n) {
    so_matcher *m = NULL;
    if (so_matcher_create(c, &m) != VLLM_OK || !m) {
        CHECK_MSG(0, "matcher: %s", vllm_last_error());
        return false;
    }
    const bool whole = so_match_bytes(m, (const uint8_t *)s, n) && so_match_can_end(m);
    so_match_rollback(m, so_match_pos(m));
    bool bytes = true;
    for (size_t i = 0; i < n && bytes; i++) bytes = so_match_bytes(m, (const uint8_t *)s + i, 1);
    bytes = bytes && so_match_can_end(m);
    CHECK_MSG(whole == bytes, "'%s': at once %d, byte by byte %d", s, whole, bytes);
    so_matcher_free(m);
    return whole;
}

static bool accepts(const so_compiled *c, const char *s) { return accepts_n(c, s, strlen(s)); }

#define N_OF(a) (sizeof(a) / sizeof *(a))

/* re (json or not) accepts every yes and no no (NULL-terminated lists) */
static void lang(const char *re, bool json, const char *const *yes, const char *const *no) {
    so_compiled *c = compile_re(re, json);
    if (!c) return;
    for (; yes && *yes; yes++) CHECK_MSG(accepts(c, *yes), "'%s' (json %d) refused '%s'", re, json, *yes);
    for (; no && *no; no++) CHECK_MSG(!accepts(c, *no), "'%s' (json %d) accepted '%s'", re, json, *no);
    so_compiled_free(c);
}

#define LANG(re, json, ...)                                                                                       \
    do {                                                                                                           \
        static const char *const yes_[] = {__VA_ARGS__, NULL};                                                     \
        lang(re, json, yes_, NULL);                                                                                \
    } while (0)
#define NOT(re, json, ...)                                                                                         \
    do {                                                                                                           \
        static const char *const no_[] = {__VA_ARGS__, NULL};                                                      \
        lang(re, json, NULL, no_);                                                                                 \
    } while (0)

/* re converts exactly to want */
static void exact(const char *re, bool json, const char *want) {
    char *e = conv(re, json);
    CHECK_MSG(e && !strcmp(e, want), "'%s' -> '%s', want '%s'", re, e ? e : "(null)", want);
    free(e);
}

/* re (len bytes) is refused: INVALID_ARG, a message holding what and "at offset N" */
static void refused_n(const char *re, size_t len, const char *what, size_t offset) {
    char *e = (char *)1;
    const vllm_status st = so_regex_to_ebnf(re, len, false, &e);
    char at[48];
    snprintf(at, sizeof at, "at offset %zu", offset);
    CHECK_MSG(st == VLLM_ERR_INVALID_ARG && e == NULL, "'%s': status %d", re, (int)st);
    const char *msg = vllm_last_error();
    CHECK_MSG(!strncmp(msg, "regex: ", 7) && strstr(msg, what) && strstr(msg, at), "'%s': '%s', want '%s' %s", re, msg,
              what, at);
    if (st == VLLM_OK) free(e);
    /* the same in json mode */
    e = NULL;
    CHECK_MSG(so_regex_to_ebnf(re, len, true, &e) == VLLM_ERR_INVALID_ARG && !e, "'%s' (json) accepted", re);
    free(e);
}

static void refused(const char *re, const char *what, size_t offset) { refused_n(re, strlen(re), what, offset); }

/* ---- xgrammar 0.1.29 tests/python/test_regex_converter.py ---- */

static void test_xgrammar_cases(void) {
    exact("123", false, "\"123\"");
    LANG("123", false, "123");
    NOT("123", false, "1234", "12", "");
    LANG("ww\xe6\x88\x91\xf0\x9f\x98\x81", false, "ww\xe6\x88\x91\xf0\x9f\x98\x81");
    NOT("ww\xe6\x88\x91\xf0\x9f\x98\x81", false, "ww\xe6\x88\x91", "ww");

    /* escapes */
    LANG("\\^\\$\\.\\*\\+\\?\\\\\\(\\)\\[\\]\\{\\}\\|\\/", false, "^$.*+?\\()[]{}|/");
    {
        so_compiled *c = compile_re("\\\"\\'\\a\\f\\n\\r\\t\\v\\0\\e", false);
        if (c) {
            CHECK(accepts_n(c, "\"'\a\f\n\r\t\v\0\x1b", 10));
            CHECK(!accepts_n(c, "\"'\a\f\n\r\t\v0\x1b", 10));
            so_compiled_free(c);
        }
    }
    LANG("\\u{20BB7}\\u0300\\x1F\\cJ", false, "\xf0\xa0\xae\xb7\xcc\x80\x1f\n");
    LANG("\\u{41}\\u{000041}\\cj\\U0001F600\\uD83D\\uDE00", false, "AA\n\xf0\x9f\x98\x80\xf0\x9f\x98\x80");
    LANG("[\\r\\n\\$\\u0010-\\u006F\\]\\--]+", false, "\r\n$ -", "]", "o", "\x10", "-]$");
    NOT("[\\r\\n\\$\\u0010-\\u006F\\]\\--]+", false, "", "p", "\t", "\xc3\xa9");

    /* class escapes */
    LANG("\\w\\w\\W\\d\\D\\s\\S", false, "A_ 1b 0", "z9\xc3\xa9" "0\xe4\xb8\xad\v[");
    NOT("\\w\\w\\W\\d\\D\\s\\S", false, "A_ 1b  ", "A_ 1b 0 ", "\xc3\xa9_ 1b 0");
    LANG("\\s+", false, " \t\n\r\f\v\xc2\xa0");
    NOT("\\s", false, "a", "\xe2\x80\x83", "");
    LANG("\\S", false, "[", "a", "\xe2\x80\x83", "\"");
    NOT("\\S", false, " ", "\t", "\xc2\xa0");
    LANG("[\\d\\s]+", false, "1 2\t3");
    LANG("[^\\d\\s]+", false, "ab[\xc3\xa9");
    NOT("[^\\d\\s]+", false, "a1", " ");
    LANG("[\\D]", false, "a");
    NOT("[\\D]", false, "5");
    LANG("[\\W\\d]+", false, "-1 2");
    NOT("[\\W\\d]+", false, "a", "_");
    LANG("[^\\W]", false, "a", "_", "7");
    NOT("[^\\W]", false, "-", "\xc3\xa9");
    LANG("[\\S\\s]+", false, "any \n thing\xc2\xa0");

    LANG("[-a-zA-Z+--]+", false, "a-+", ",", "Zz");
    NOT("[-a-zA-Z+--]+", false, ".", "");
    LANG("^abc$", false, "abc");
    NOT("^abc$", false, "ab", "abcabc");
    exact("^abc$", false, "\"abc\"");
    LANG("abc|de(f|g)", false, "deg", "abc", "def");
    NOT("abc|de(f|g)", false, "de", "abcdef", "abdef");
    exact("abc|de(f|g)", false, "\"abc\" | \"de\" ( \"f\" | \"g\" )");
    LANG(" abc | df | g ", false, " df ", " abc ", " g ");
    NOT(" abc | df | g ", false, "df", " g");
    LANG("(a|b)?[a-z]+(abc)*", false, "adddabcabc", "z", "abc");
    NOT("(a|b)?[a-z]+(abc)*", false, "", "A");
    LANG("(a|b)(c|d)", false, "ac", "bd");
    NOT("(a|b)(c|d)", false, "ab", "a");

    /* `.`: every code point, \n included (0.1.29's [\u0000-\U0010FFFF]) */
    LANG(".+a.+", false, "bbbabb", "\na\n", "\xf0\x9f\x98\x80" "a\"");
    NOT(".+a.+", false, "ba", "a");

    const char *ipv4_dot = "((25[0-5]|2[0-4]\\d|[01]?\\d\\d?).)((25[0-5]|2[0-4]\\d|[01]?\\d\\d?).)((25[0-5]|2[0-4]\\d|"
                           "[01]?\\d\\d?).)(25[0-5]|2[0-4]\\d|[01]?\\d\\d?)";
    LANG(ipv4_dot, false, "123.45.67.89", "1x2y3z4", "255.255.255.255");
    NOT(ipv4_dot, false, "256.1.1.1", "1.2.3");

    const char *date_time = "^\\d\\d\\d\\d-(0[1-9]|1[0-2])-([0-2]\\d|3[01])T([01]\\d|2[0123]):[0-5]\\d:[0-5]\\d(\\.\\d+)"
                            "?(Z|[+-]([01]\\d|2[0123]):[0-5]\\d)$";
    LANG(date_time, false, "2024-05-19T14:23:45Z", "2019-11-30T08:15:27+05:30", "2030-02-01T22:59:59-07:00",
         "2021-07-04T00:00:00.123456Z", "2022-12-31T23:45:12-03:00");
    NOT(date_time, false, "2024-13-15T14:30:00Z", "2023-02-2010:59:59Z", "2021-11-05T24:00:00+05:30",
        "2022-08-20T12:61:10-03:00");
    const char *date = "^\\d\\d\\d\\d-(0[1-9]|1[0-2])-([0-2]\\d|3[01])$";
    LANG(date, false, "0024-05-19", "2019-11-30", "2022-12-31");
    NOT(date, false, "2024-13-15", "2024-12-32");
    const char *time = "^([01]\\d|2[0123]):[0-5]\\d:[0-5]\\d(\\.\\d+)?(Z|[+-]([01]\\d|2[0123]):[0-5]\\d)$";
    LANG(time, false, "14:23:45Z", "08:15:27+05:30", "22:59:59-07:00", "00:00:00.123456Z");
    NOT(time, false, "10:59:59ZA", "24:00:00+05:30", "12:15:10-03:60");
    const char *email = "^([\\w!#$%&'*+/=?^_`{|}~-]+(\\.[\\w!#$%&'*+/=?^_`{|}~-]+)*|\"([\\w!#$%&'*+/=?^_`{|}~\\-(),:;<>@["
                        "\\].]|\\\\\")+\")@(([a-z0-9]([a-z0-9-]*[a-z0-9])?\\.)+[a-z0-9]([a-z0-9-]*[a-z0-9])?)$";
    LANG(email, false, "simple@example.com", "very.common@example.com", "user_name+123@example.co.uk",
         "\"john.doe\"@example.org", "mail-host@online-shop.biz", "customer/department=shipping@example.com",
         "$A12345@example.non-profit.org", "\"!def!xyz%abc\"@example.com", "support@192.168.1.1",
         "customer/department=shipping@test.example.test-example.com");
    NOT(email, false, "plainaddress", "@missingusername.com", "user@.com.my", "user@com", "user@-example.com");

    /* group modifiers, empty groups and alternatives (HEAD's fixes for leading / doubled / trailing ones) */
    exact("(?:abc)", false, "( \"abc\" )");
    exact("(?<name>abc)", false, "( \"abc\" )");
    LANG("(?P<year>\\d{4})-(?<m_1>\\d\\d)", false, "2024-05");
    LANG("()", false, "");
    NOT("()", false, "a");
    LANG("a()b", false, "ab");
    LANG("(a|)", false, "a", "");
    NOT("(a|)", false, "b", "aa");
    LANG("ab(c|)", false, "abc", "ab");
    NOT("ab(c|)", false, "abd");
    LANG("(|a)", false, "", "a");
    LANG("a||b", false, "a", "b", "");
    LANG("abc|", false, "abc", "");
    LANG("|", false, "");
    LANG("^$|abc", false, "", "abc");
    NOT("^$|abc", false, "ab");
    static const char *const empties[] = {"", "^$", "(())", "()", "^", "$", "()|()", "(?:)", "$^"};
    for (size_t i = 0; i < N_OF(empties); i++) {
        static const char *const yes[] = {"", NULL}, *const no[] = {"a", NULL};
        lang(empties[i], false, yes, no);
    }
    exact("", false, "\"\"");

    /* lazy quantifiers: the same language */
    exact("a{1,3}?", false, "\"a\"{1,3}");
    exact("a+?", false, "\"a\"+");
    exact("a*?", false, "\"a\"*");
    exact("a??", false, "\"a\"?");
    LANG("a{1,3}?", false, "a", "aa", "aaa");
    NOT("a{1,3}?", false, "", "aaaa");
    LANG("a+?", false, "a", "aaa");
    NOT("a+?", false, "");
    LANG("a*?", false, "", "aa");
    LANG("a??", false, "", "a");
    NOT("a??", false, "aa");
    LANG("x(ab){2,}?y", false, "xababy", "xabababy");
    NOT("x(ab){2,}?y", false, "xaby", "xy");
    LANG("a{0}b", false, "b");
    NOT("a{0}b", false, "ab");
    LANG("a{0,0}", false, "");
    LANG("(?:ab|c){2}", false, "abab", "abc", "cc");
    NOT("(?:ab|c){2}", false, "c", "ababc");
}

/* ---- more syntax ---- */

static void test_syntax(void) {
    /* literals: ] } and punctuation; escaped punctuation, space and non-ASCII are themselves */
    LANG("a]}", false, "a]}");
    LANG("\\-\\ \\@\\#\\\xc3\xa9\\,\\:\\<\\=\\'\\\"", false, "- @#\xc3\xa9,:<='\"");
    LANG("\"\\\\", false, "\"\\");
    exact("ab*c", false, "\"a\" \"b\"* \"c\"");
    exact("a\"b\\\\", false, "\"a\\\"b\\\\\"");
    LANG("\x7f\x01", false, "\x7f\x01");
    /* classes */
    LANG("[\\d-z]+", false, "5", "-", "z", "1-z");
    NOT("[\\d-z]+", false, "a", "y");
    LANG("[a-c-e]+", false, "a", "b", "-", "e");
    NOT("[a-c-e]+", false, "d");
    LANG("[[]", false, "[");
    LANG("[a^]+", false, "^a");
    LANG("[\\^a]", false, "^", "a");
    NOT("[\\^a]", false, "b");
    LANG("[\\b]", false, "\b");
    LANG("[^]", false, "a", "\n", "\xf0\x9f\x98\x80");
    NOT("[^]", false, "", "ab");
    LANG("[\\x41-\\x43\\u00e9-\\u00eb\\u{1F600}]", false, "A", "C", "\xc3\xa9", "\xc3\xab", "\xf0\x9f\x98\x80");
    NOT("[\\x41-\\x43\\u00e9-\\u00eb\\u{1F600}]", false, "D", "\xc3\xac", "\xf0\x9f\x98\x81");
    LANG("[\xe4\xb8\x80-\xe9\xbe\xa5]+", false, "\xe4\xb8\xad\xe6\x96\x87");
    NOT("[\xe4\xb8\x80-\xe9\xbe\xa5]+", false, "a");
    LANG("[^a-z]", false, "A", "\n", "\xf4\x8f\xbf\xbf");
    NOT("[^a-z]", false, "m");
    LANG("[\\ud7ff\\ue000]", false, "\xed\x9f\xbf", "\xee\x80\x80");
    LANG("[^\\ud7ff\\ue000]", false, "\xed\x9f\xbe", "\xee\x80\x81");
    NOT("[^\\ud7ff\\ue000]", false, "\xed\x9f\xbf", "\xee\x80\x80");
    LANG("[\\]\\-\\\\\\[\\/]+", false, "]-\\[/");
    /* anchors where nothing can precede or follow them */
    LANG("^a$|^b$", false, "a", "b");
    LANG("(^a|b)c", false, "ac", "bc");
    LANG("x(a$|b$)", false, "xa", "xb");
    LANG("(?:^(?:ab)$)", false, "ab");
    LANG("^^a$$", false, "a");
    LANG("(^a)?b", false, "ab", "b");
    LANG("a(b$){0,1}", false, "a", "ab");
}

/* ---- json_string ---- */

static void test_json_string(void) {
    /* literals JSON must escape become their escapes */
    exact("a\"b", true, "\"a\\\\\\\"b\"");
    LANG("a\"b", true, "a\\\"b");
    NOT("a\"b", true, "a\"b", "a\\\\b");
    LANG("\\\\d", true, "\\\\d");
    NOT("\\\\d", true, "\\d", "\\\\5");
    LANG("a\\nb\\tc\\r\\f\\x08", true, "a\\nb\\tc\\r\\f\\b");
    NOT("a\\nb\\tc\\r\\f\\x08", true, "a\nb\tc\r\f\b");
    LANG("\\x01\\x1b\\x1f\\0", true, "\\u0001\\u001b\\u001F\\u0000", "\\u0001\\u001B\\u001f\\u0000");
    NOT("\\x01\\x1b\\x1f\\0", true, "\\u0001\\u001b\\u001g\\u0000");
    LANG("\"+", true, "\\\"", "\\\"\\\"");
    NOT("\"+", true, "\"", "\\\"\\");
    LANG("\\x1b{2}x", true, "\\u001b\\u001Bx");
    NOT("\\x1b{2}x", true, "\\u001bx");
    /* what is not JSON's business stays as it is */
    LANG("'/\xc3\xa9 ", true, "'/\xc3\xa9 ");
    /* `.`, negated classes, \D \W \S never produce ", \ or a control character */
    LANG(".*", true, "abc \xc3\xa9\xf0\x9f\x98\x80'/");
    NOT(".", true, "\"", "\\", "\n", "\x01", "\x1f", "\\\"");
    LANG(".", false, "\"", "\\", "\n");
    NOT("[^a]", true, "\"", "\\", "\t", "a");
    LANG("[^a]", true, "b", "\x7f");
    LANG("[^\"]*", true, "abc'");
    NOT("[^\"]*", true, "a\"", "a\\\"");
    NOT("\\D", true, "\"", "\\", "\n", "5");
    NOT("\\W", true, "\"", "\\", "\n", "a");
    LANG("\\W", true, "-", " ");
    NOT("\\S", true, "\"", "\\", "\x01", " ");
    NOT("[\\D]", true, "\"", "\\", "\n");
    NOT("[^\\d]", true, "\"", "\\", "\n");
    LANG("[^\\D]", true, "7");
    NOT("[^\\D]", true, "\"", "a");
    /* a class naming them: their escapes */
    LANG("[a\"]", true, "a", "\\\"");
    NOT("[a\"]", true, "\"", "\\");
    LANG("[\"]", true, "\\\"");
    LANG("[ -~]+", true, "abc ~", "a\\\"b\\\\c");
    NOT("[ -~]+", true, "\"", "\\", "\\n");
    LANG("[\\x00-\\x1f]", true, "\\n", "\\t", "\\r", "\\b", "\\f", "\\u0000", "\\u0007", "\\u000b", "\\u000B",
         "\\u001f", "\\u001F", "\\u0010");
    NOT("[\\x00-\\x1f]", true, "\n", "\x01", "\\u0020", "\\u000a", "\\\"", "\\a");
    LANG("\\s", true, " ", "\\t", "\\n", "\\r", "\\f", "\\u000b", "\xc2\xa0");
    NOT("\\s", true, "\t", "\n", "\\v");
    LANG("[\\s\\S]+", true, "a b\\n\\t");
    NOT("[\\s\\S]+", true, "\"", "\\\"");
    LANG("\"[^\"]*\"", true, "\\\"quoted text\\\"");
    /* the same bodies wrapped as a JSON string by a grammar */
    {
        char *e = conv("[a-z\"]+", true);
        if (e) {
            char text[512];
            snprintf(text, sizeof text, "\"\\\"\" ( %s ) \"\\\"\"", e);
            so_compiled *c = compile_ebnf(text, "[a-z\"]+", true);
            if (c) {
                CHECK(accepts(c, "\"ab\\\"c\""));
                CHECK(!accepts(c, "\"ab\"c\""));
                so_compiled_free(c);
            }
            free(e);
        }
    }
}

/* ---- xgrammar 0.1.29's JSON-schema format regexes (cpp/json_schema_converter.cc) and real-world patterns ---- */

static void test_formats(void) {
    /* email: its quoted local part is written as it appears inside a JSON string (\"...\"), so json_string off */
    const char *atext = "[\\w!#$%&'*+/=?^`{|}~-]";
    char dot_string[128], email[640];
    snprintf(dot_string, sizeof dot_string, "(%s+(\\.%s+)*)", atext, atext);
    const char *quoted = "\\\\\"(\\\\[\\x20-\\x7E]|[\\x20\\x21\\x23-\\x5B\\x5D-\\x7E])*\\\\\"";
    const char *domain = "([A-Za-z0-9]([\\-A-Za-z0-9]*[A-Za-z0-9])?)((\\.[A-Za-z0-9][\\-A-Za-z0-9]*[A-Za-z0-9])*)";
    snprintf(email, sizeof email, "^(%s|%s)@%s$", dot_string, quoted, domain);
    LANG(email, false, "simple@example.com", "a.b+c@example.co.uk", "\\\"john doe\\\"@example.org", "x@localhost",
         "\\\"a\\\\\\\"b\\\"@ex.com");
    NOT(email, false, "plainaddress", "@example.com", "a@-b.com", "a..b@c.com", "\"john\"@example.org",
        "a@example.c", "a b@c.com");

    const char *date = "^(\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[1-2]\\d|3[01]))$";
    const char *time = "^([01]\\d|2[0-3]):[0-5]\\d:([0-5]\\d|60)(\\.\\d+)?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)$";
    const char *date_time = "^(\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[1-2]\\d|3[01]))T([01]\\d|2[0-3]):([0-5]\\d|60):["
                            "0-5]\\d(\\.\\d+)?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)$";
    const char *duration = "^P((\\d+D|\\d+M(\\d+D)?|\\d+Y(\\d+M(\\d+D)?)?)(T(\\d+S|\\d+M(\\d+S)?|\\d+H(\\d+M(\\d+S)?"
                           ")?))?|T(\\d+S|\\d+M(\\d+S)?|\\d+H(\\d+M(\\d+S)?)?)|\\d+W)$";
    const char *ipv4 = "^((25[0-5]|2[0-4]\\d|[0-1]?\\d?\\d)\\.){3}(25[0-5]|2[0-4]\\d|[0-1]?\\d?\\d)$";
    const char *ipv6 =
        "(([0-9a-fA-F]{1,4}:){7,7}[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,7}:|([0-9a-fA-F]{1,4}:){1,6}:[0-9a-fA-F]{1,4}|"
        "([0-9a-fA-F]{1,4}:){1,5}(:[0-9a-fA-F]{1,4}){1,2}|([0-9a-fA-F]{1,4}:){1,4}(:[0-9a-fA-F]{1,4}){1,3}|"
        "([0-9a-fA-F]{1,4}:){1,3}(:[0-9a-fA-F]{1,4}){1,4}|([0-9a-fA-F]{1,4}:){1,2}(:[0-9a-fA-F]{1,4}){1,5}|"
        "[0-9a-fA-F]{1,4}:((:[0-9a-fA-F]{1,4}){1,6})|:((:[0-9a-fA-F]{1,4}){1,7}|:)|::(ffff(:0{1,4}){0,1}:){0,1}"
        "((25[0-5]|(2[0-4]|1{0,1}[0-9]){0,1}[0-9])\\.){3,3}(25[0-5]|(2[0-4]|1{0,1}[0-9]){0,1}[0-9])|"
        "([0-9a-fA-F]{1,4}:){1,4}:((25[0-5]|(2[0-4]|1{0,1}[0-9]){0,1}[0-9])\\.){3,3}"
        "(25[0-5]|(2[0-4]|1{0,1}[0-9]){0,1}[0-9]))";
    const char *hostname = "^([a-z0-9]([a-z0-9-]*[a-z0-9])?)(\\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$";
    const char *uuid = "^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$";
    const char *pchar = "([\\w\\.~!$&'()*+,;=:@-]|%[0-9A-Fa-f][0-9A-Fa-f])";
    const char *qf = "([\\w\\.~!$&'()*+,;=:@/\\?-]|%[0-9A-Fa-f][0-9A-Fa-f])*";
    const char *userinfo = "([\\w\\.~!$&'()*+,;=:-]|%[0-9A-Fa-f][0-9A-Fa-f])*";
    const char *host = "([\\w\\.~!$&'()*+,;=-]|%[0-9A-Fa-f][0-9A-Fa-f])*";
    char uri[1400];
    snprintf(uri, sizeof uri, "^[a-zA-Z][a-zA-Z+\\.-]*:(//(%s@)?%s(:\\d*)?(/%s*)*|/?(%s+(/%s*)*)?)(\\?%s)?(#%s)?$",
             userinfo, host, pchar, pchar, pchar, qf, qf);
    for (int json = 0; json < 2; json++) {
        LANG(date, json, "2024-02-29", "0001-12-31");
        NOT(date, json, "2024-00-10", "2024-1-10", "2024-01-32", "20240110");
        LANG(time, json, "23:59:60Z", "00:00:00.5+14:00", "12:30:00-05:30");
        NOT(time, json, "24:00:00Z", "12:30:00", "12:30Z", "12:30:00+5:30");
        LANG(date_time, json, "2024-05-19T14:23:45Z", "1999-12-31T23:59:59.999-08:00");
        NOT(date_time, json, "2024-05-19 14:23:45Z", "2024-05-19T14:23:45");
        LANG(duration, json, "P3Y6M4DT12H30M5S", "P1W", "PT36H", "P1D", "PT1M30S");
        NOT(duration, json, "P", "PT", "P1H", "3Y", "P1W2D");
        LANG(ipv4, json, "192.168.0.1", "0.0.0.0", "255.255.255.255", "01.002.3.4");
        NOT(ipv4, json, "256.0.0.1", "1.2.3", "1.2.3.4.5", "1.2.3.a");
        LANG(ipv6, json, "2001:db8:85a3:0:0:8a2e:370:7334", "::1", "::", "fe80::1", "1::", "::ffff:192.168.1.1",
             "64:ff9b::192.0.2.33", "1:2:3:4:5:6:7:8");
        NOT(ipv6, json, "1:2:3:4:5:6:7:8:9", "12345::", "1:2", "g::1", ":::");
        LANG(hostname, json, "example.com", "a", "my-host.local", "x1.y2.z3");
        NOT(hostname, json, "-a.com", "a-.com", "a..b", "Example.com", "");
        LANG(uuid, json, "123e4567-e89b-12d3-a456-426614174000", "ABCDEF01-2345-6789-abcd-ef0123456789");
        NOT(uuid, json, "123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400g");
        LANG(uri, json, "https://example.com/path?q=1#frag", "mailto:someone@example.com", "urn:isbn:0451450523",
             "http://user:pw@host:8080/a/b%20c", "file:///etc/hosts");
        NOT(uri, json, "://missing", "1http://x", "http://exa mple.com", "http://x/%zz");
    }

    /* real-world patterns */
    LANG("^[a-z0-9_-]{3,16}$", true, "abc", "user_name-1", "a234567890123456");
    NOT("^[a-z0-9_-]{3,16}$", true, "ab", "a2345678901234567", "User", "a b c");
    LANG("^[\\w.+-]+@[\\w-]+\\.[\\w.-]+$", true, "john.doe+tag@mail-server.example.com");
    NOT("^[\\w.+-]+@[\\w-]+\\.[\\w.-]+$", true, "john@localhost", "@x.y", "a@b.");
    LANG("^\\d{4}-\\d{2}-\\d{2}$", true, "2024-01-31");
    NOT("^\\d{4}-\\d{2}-\\d{2}$", true, "2024-1-31", "24-01-31");
    LANG("^\\+?1?\\d{9,15}$", true, "+14155552671", "123456789");
    NOT("^\\+?1?\\d{9,15}$", true, "12345678", "++14155552671");
    LANG("^\\(?\\d{3}\\)?[-. ]?\\d{3}[-. ]?\\d{4}$", true, "(555) 123-4567", "555.123.4567", "5551234567");
    NOT("^\\(?\\d{3}\\)?[-. ]?\\d{3}[-. ]?\\d{4}$", true, "555-1234", "(555)--123-4567");
    LANG("^(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)$", true,
         "10.0.0.255");
    NOT("^(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)$", true,
        "10.0.0.256", "10.0.0");
    LANG("^[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$", true,
         "550e8400-e29b-41d4-a716-446655440000");
    NOT("^[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$", true,
        "550e8400-e29b-61d4-a716-446655440000", "550e8400-e29b-41d4-c716-446655440000");
    LANG("^#(?:[0-9a-fA-F]{3}){1,2}$", true, "#fff", "#A0b1C2");
    NOT("^#(?:[0-9a-fA-F]{3}){1,2}$", true, "#ffff", "fff", "#ggg");
    const char *semver = "^(?P<major>0|[1-9]\\d*)\\.(?P<minor>0|[1-9]\\d*)\\.(?P<patch>0|[1-9]\\d*)(?:-(?P<pre>(?:0|[1-"
                         "9]\\d*|\\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\\.(?:0|[1-9]\\d*|\\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\\+("
                         "?P<build>[0-9a-zA-Z-]+(?:\\.[0-9a-zA-Z-]+)*))?$";
    LANG(semver, true, "1.0.0", "1.2.3-alpha.1+build.5", "10.20.30-rc.1");
    NOT(semver, true, "1.2", "01.2.3", "1.2.3-", "1.2.3-01");
    LANG("^https?:\\/\\/[^\\s/$.?#].[^\\s]*$", true, "https://example.com/a?b=c", "http://x.y");
    NOT("^https?:\\/\\/[^\\s/$.?#].[^\\s]*$", true, "ftp://x.y", "https://.x", "http://ab c", "http://a\"b");
    LANG("^(Mr|Mrs|Ms|Dr)\\.? [A-Z][a-z]+$", true, "Dr. Smith", "Ms Jones");
    NOT("^(Mr|Mrs|Ms|Dr)\\.? [A-Z][a-z]+$", true, "Prof. X", "Dr smith");
    LANG("^\\$?\\d{1,3}(,\\d{3})*(\\.\\d{2})?$", true, "$1,234.56", "12", "1,000,000");
    NOT("^\\$?\\d{1,3}(,\\d{3})*(\\.\\d{2})?$", true, "1234,5", "$1.5");
}

/* ---- refusals ---- */

static void test_errors(void) {
    /* backreferences, lookaround, boundaries, anchors, properties */
    refused("(a)\\1", "backreference \\1", 3);
    refused("(?<x>a)\\k<x>", "backreference \\k", 7);
    refused("(?P<x>a)(?P=x)", "backreference (?P=", 8);
    refused("a(?=b)", "lookahead", 1);
    refused("a(?!b)", "lookahead", 1);
    refused("(?<=a)b", "lookbehind", 0);
    refused("(?<!a)b", "lookbehind", 0);
    refused("\\bword", "word boundary \\b", 0);
    refused("a\\B", "word boundary \\B", 1);
    refused("[\\B]", "word boundary \\B", 1);
    refused("\\Aabc", "anchor \\A", 0);
    refused("abc\\Z", "anchor \\Z", 3);
    refused("abc\\z", "anchor \\z", 3);
    refused("\\G", "anchor \\G", 0);
    refused("\\p{L}", "Unicode property escape \\p", 0);
    refused("[\\P{L}]", "Unicode property escape \\P", 1);
    refused("a^b", "'^' not at the start", 1);
    refused("a(^b)", "'^' not at the start", 2);
    refused("a$b", "'$' not at the end", 1);
    refused("(a$)b", "'$' not at the end", 2);
    refused("(a$|b)c", "'$' not at the end", 2);
    refused("(^a)*", "anchor inside a repeated group", 0);
    refused("(a$)+", "anchor inside a repeated group", 2);
    /* groups */
    refused("(?>a)", "atomic group", 0);
    refused("(?i)abc", "inline flags", 0);
    refused("(?i:no)?yes", "inline flags", 0);
    refused("(?-i:a)", "inline flags", 0);
    refused("(?#comment)", "unsupported group modifier", 0);
    refused("x(?", "unterminated group", 1);
    refused("(?<1a>x)", "invalid group name", 0);
    refused("(?<>x)", "invalid group name", 0);
    refused("(?<a-b>x)", "invalid group name", 0);
    refused("(?Px)", "unsupported group modifier", 0);
    refused("abc((a)", "unclosed '('", 3);
    refused("abc)", "unmatched ')'", 3);
    refused("(a))", "unmatched ')'", 3);
    /* quantifiers */
    refused("*a", "nothing to repeat", 0);
    refused("a|*b", "nothing to repeat", 2);
    refused("(+a)", "nothing to repeat", 1);
    refused("^*", "nothing to repeat", 1);
    refused("a$?", "nothing to repeat", 2);
    refused("{2}", "nothing to repeat", 0);
    refused("a{1,3}?{1,3}", "two consecutive quantifiers", 7);
    refused("a???", "two consecutive quantifiers", 3);
    refused("a++", "possessive quantifier", 2);
    refused("a*+", "possessive quantifier", 2);
    refused("a+?{1,3}", "two consecutive quantifiers", 3);
    refused("a{2}{3}", "two consecutive quantifiers", 4);
    refused("a**", "two consecutive quantifiers", 2);
    refused("a{", "invalid repetition count", 1);
    refused("a{x}", "invalid repetition count", 1);
    refused("a{1", "invalid repetition count", 1);
    refused("a{1,", "invalid repetition count", 1);
    refused("a{,3}", "invalid repetition count", 1);
    refused("a{1,x}", "invalid repetition count", 1);
    refused("a{ 1}", "invalid repetition count", 1);
    refused("a{3,2}", "repetition range out of order", 1);
    refused("ab{10001}", "repeat count over 10000", 2);
    refused("a{1,10001}", "repeat count over 10000", 1);
    refused("a{99999999999999999999999}", "repeat count over 10000", 1);
    /* classes */
    refused("[]", "empty character class", 0);
    refused("x[]a]", "empty character class", 1);
    refused("[abc", "unterminated character class", 0);
    refused("a[^", "unterminated character class", 1);
    refused("[a-", "unterminated character class", 0);
    refused("[z-a]", "invalid class range: out of order", 1);
    refused("[\\x42-\\x41]", "invalid class range: out of order", 1);
    refused("[a-\\d]", "invalid class range: a class escape", 1);
    /* escapes */
    refused("ab\\", "unterminated escape", 2);
    refused("[a\\", "unterminated escape", 2);
    refused("\\y", "unknown escape \\y", 0);
    refused("a\\K", "unknown escape \\K", 1);
    refused("\\012", "octal escape", 0);
    refused("\\x4", "invalid \\x escape", 0);
    refused("\\xg0", "invalid \\x escape", 0);
    refused("\\u12", "invalid \\u escape", 0);
    refused("\\u{}", "invalid \\u{...} escape", 0);
    refused("\\u{1234567}", "invalid \\u{...} escape", 0);
    refused("\\u{110000}", "invalid \\u{...} escape", 0);
    refused("\\u{12", "invalid \\u{...} escape", 0);
    refused("\\u{D800}", "invalid \\u{...} escape", 0);
    refused("\\uD800", "lone surrogate \\uD800", 0);
    refused("\\uDC00x", "lone surrogate \\uDC00", 0);
    refused("\\uD83Dx", "lone surrogate \\uD83D", 0);
    refused("\\U00110000", "invalid code point in \\U escape", 0);
    refused("\\U1234", "invalid \\U escape", 0);
    refused("\\c1", "invalid control escape", 0);
    refused("\\c", "invalid control escape", 0);
    /* the text itself */
    refused_n("ab\0c", 4, "NUL byte", 2);
    refused("a\xff", "invalid UTF-8", 1);
    refused("ab\xc3", "invalid UTF-8", 2);
    refused("\xc0\x80", "invalid UTF-8", 0);
    refused("\xed\xa0\x80", "invalid UTF-8", 0);
    refused("x\xf4\x90\x80\x80", "invalid UTF-8", 1);
    /* arguments */
    char *e = (char *)1;
    CHECK(so_regex_to_ebnf(NULL, 3, false, &e) == VLLM_ERR_INVALID_ARG && e == NULL);
    CHECK(so_regex_to_ebnf("a", 1, false, NULL) == VLLM_ERR_INVALID_ARG);
    CHECK(so_regex_to_ebnf(NULL, 0, false, &e) == VLLM_OK && e && !strcmp(e, "\"\""));
    free(e);
    /* only len bytes are read */
    e = NULL;
    CHECK(so_regex_to_ebnf("ab)", 2, false, &e) == VLLM_OK && e && !strcmp(e, "\"ab\""));
    free(e);
}

/* ---- bounds ---- */

static void test_bounds(void) {
    /* length: 64 KiB */
    const size_t max = 65536;
    char *big = malloc(max + 2);
    if (!big) return;
    memset(big, 'a', max + 1);
    big[max + 1] = 0;
    char *e = NULL;
    CHECK_OK(so_regex_to_ebnf(big, max, false, &e));
    CHECK(e && strlen(e) == max + 2);
    free(e);
    e = NULL;
    CHECK(so_regex_to_ebnf(big, max + 1, false, &e) == VLLM_ERR_INVALID_ARG && !e);
    const char *msg = vllm_last_error();
    CHECK_MSG(strstr(msg, "regex: longer than 65536 bytes") && strstr(msg, "at offset 65536"), "%s", msg);
    /* a long regex of many kinds of atoms, json or not, converts and compiles */
    size_t n = 0;
    while (n + 16 <= max) n += (size_t)snprintf(big + n, max + 2 - n, "[^\"a]\\s.\"x?|");
    big[n] = 0;
    for (int json = 0; json < 2; json++) {
        e = NULL;
        CHECK_OK(so_regex_to_ebnf(big, n, json, &e));
        so_compiled *c = e ? compile_ebnf(e, "(long)", true) : NULL;
        if (c) CHECK(accepts(c, json ? "b\\nc\\\"" : "b\n\v\"x"));
        so_compiled_free(c);
        free(e);
    }
    free(big);

    /* nesting: 256 groups, not 257 (the output's own parentheses count: a json class choice) */
    char nest[2048];
    for (int depth = 255; depth <= 257; depth++) {
        size_t k = 0;
        for (int i = 0; i < depth; i++) nest[k++] = '(';
        memcpy(nest + k, "[a\"]", 4), k += 4;
        for (int i = 0; i < depth; i++) nest[k++] = ')';
        nest[k] = 0;
        for (int json = 0; json < 2; json++) {
            e = NULL;
            const vllm_status st = so_regex_to_ebnf(nest, k, json, &e);
            const bool ok = depth + json <= 256;
            CHECK_MSG((st == VLLM_OK) == ok, "depth %d json %d: %s", depth, json, vllm_last_error());
            if (!ok) CHECK(strstr(vllm_last_error(), "groups nested deeper than 256") != NULL);
            if (e) {
                so_compiled *c = compile_ebnf(e, "(nested)", true); /* the EBNF reader's own bound is 256 as well */
                if (c) CHECK(accepts(c, json ? "\\\"" : "\""));
                so_compiled_free(c);
            }
            free(e);
        }
    }
    /* a quantified escape pair wrapped in parentheses counts as well */
    {
        size_t k = 0;
        for (int i = 0; i < 256; i++) nest[k++] = '(';
        memcpy(nest + k, "\\x1b*", 5), k += 5;
        for (int i = 0; i < 256; i++) nest[k++] = ')';
        e = NULL;
        CHECK(so_regex_to_ebnf(nest, k, false, &e) == VLLM_OK);
        free(e);
        e = NULL;
        CHECK(so_regex_to_ebnf(nest, k, true, &e) == VLLM_ERR_INVALID_ARG && !e);
    }

    /* counts: 10000 accepted; a product of counts is the matcher's to refuse */
    so_compiled *c = compile_re("a{10000}", false);
    if (c) {
        char *s = malloc(10002);
        if (s) {
            memset(s, 'a', 10001);
            s[10001] = 0;
            CHECK(!accepts(c, s));
            s[10000] = 0;
            CHECK(accepts(c, s));
            free(s);
        }
        so_compiled_free(c);
    }
    e = conv("(a{10000}){10000}", false);
    if (e) {
        so_grammar *g = NULL;
        so_compiled *cc = NULL;
        char text[64];
        snprintf(text, sizeof text, "root ::= %s", e);
        CHECK_OK(so_ebnf_parse(text, strlen(text), NULL, &g));
        if (g) CHECK(so_compile(g, &cc) == VLLM_ERR_INVALID_ARG && !cc);
        so_compiled_free(cc);
        so_grammar_free(g);
        free(e);
    }
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static unsigned rnd(unsigned n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (unsigned)(rng_state % n);
}

/* ---- the differential run against Oniguruma (the tokenizer's engine), Perl syntax: Ruby's a{2}? is (a{2})? ---- */

static void test_onig_differential(void) {
    OnigEncoding encs[1] = {ONIG_ENCODING_UTF8};
    if (onig_initialize(encs, 1) != ONIG_NORMAL) {
        CHECK_MSG(0, "Oniguruma failed to initialize");
        return;
    }
    /* what both read alike (no [^] [[ {,n} (?P< ), whole-text matches; `.` matches \n (ONIG_OPTION_MULTILINE) */
    static const char *const atoms[] = {
        "a", "b", ".", "|", "(", ")", "*", "+", "?", "*?", "+?", "??", "[ab]", "[^a]", "[a-]", "[-b]", "[\\d-]", "\\d",
        "\\D", "\\w", "\\W", "\\s", "\\S", "{2}", "{0,1}", "{1,}", "{1,2}?", "^", "$", "()", "(?:", "(?<n>", "(a|)",
        "\\-", "\\.", "[^\\s]", "-", "1", " ", "\"", "[^\"]", "[a\"]", "\\x41", "[\\x2d-\\x31]", "[ -1]", "[^-b\\n]",
        "\\n", "a", "b", "(", ")", "|"};
    static const char alpha[] = "ab-1 \n.";
    const unsigned na = sizeof alpha - 1;
    int compared = 0, disagreed = 0;
    for (int t = 0; t < 1200 && disagreed < 5; t++) {
        char re[96] = "", pat[128]; /* 7 atoms of at most 11 bytes */
        const unsigned k = 1 + rnd(7);
        for (unsigned i = 0; i < k; i++) strcat(re, atoms[rnd(N_OF(atoms))]);
        char *e = NULL;
        if (so_regex_to_ebnf(re, strlen(re), false, &e) != VLLM_OK) continue;
        snprintf(pat, sizeof pat, "\\A(?:%s)\\z", re);
        OnigRegex ore = NULL;
        OnigErrorInfo einfo;
        if (onig_new(&ore, (const OnigUChar *)pat, (const OnigUChar *)pat + strlen(pat), ONIG_OPTION_MULTILINE,
                     ONIG_ENCODING_UTF8, ONIG_SYNTAX_PERL, &einfo) != ONIG_NORMAL) {
            free(e);
            continue;
        }
        so_compiled *c = compile_ebnf(e, re, true);
        char *ej = conv(re, true);
        so_compiled *cj = ej ? compile_ebnf(ej, re, true) : NULL;
        free(ej);
        if (c) {
            compared++;
            char s[8];
            for (unsigned len = 0; len <= 3; len++) {
                unsigned total = 1;
                for (unsigned i = 0; i < len; i++) total *= na;
                for (unsigned code = 0; code < total; code++) {
                    unsigned x = code;
                    for (unsigned i = 0; i < len; i++) s[i] = alpha[x % na], x /= na;
                    s[len] = 0;
                    const OnigUChar *u = (const OnigUChar *)s;
                    const bool want = onig_match(ore, u, u + len, u, NULL, ONIG_OPTION_NONE) == (int)len;
                    const bool got = accepts(c, s);
                    /* json_string changes nothing for a text without ", \ or a control character */
                    if (cj && !strchr(s, '\n')) CHECK_MSG(accepts(cj, s) == got, "'%s' json_string: '%s'", re, s);
                    if (want != got && disagreed++ < 5)
                        CHECK_MSG(0, "'%s' -> %s: '%s' Oniguruma %d, ours %d", re, e, s, want, got);
                }
            }
            so_compiled_free(c);
        }
        so_compiled_free(cj);
        onig_free(ore);
        free(e);
    }
    onig_end();
    CHECK_MSG(compared > 200, "only %d regexes compared", compared);
}

/* ---- random regexes: every conversion reads as EBNF and compiles ---- */

static void test_random(void) {
    static const char *const atoms[] = {"a", "\"", "\\", "(", ")", "(?:", "(?<n>", "[", "]", "^", "$", "-", "|", "*",
                                        "+", "?", "{", "}", "1", ",", "2", "d", "D", "s", "S", "w", "W", "x", "u",
                                        "b", "n", "0", ".", "\xc3\xa9", "\x01", " ", "c", "{2}", "{1,2}", "[^"};
    int ok = 0;
    for (int t = 0; t < 20000; t++) {
        char re[96] = ""; /* 12 atoms of at most 5 bytes */
        const unsigned k = 1 + rnd(12);
        for (unsigned i = 0; i < k; i++) strcat(re, atoms[rnd(N_OF(atoms))]);
        for (int json = 0; json < 2; json++) {
            char *e = NULL;
            const vllm_status st = so_regex_to_ebnf(re, strlen(re), json, &e);
            if (st != VLLM_OK) {
                CHECK_MSG(st == VLLM_ERR_INVALID_ARG && !e && !strncmp(vllm_last_error(), "regex: ", 7) &&
                              strstr(vllm_last_error(), " at offset "),
                          "'%s': %d %s", re, (int)st, vllm_last_error());
                continue;
            }
            ok++;
            so_compiled *c = compile_ebnf(e, re, true);
            so_compiled_free(c);
            free(e);
        }
    }
    CHECK_MSG(ok > 2000, "only %d random regexes converted", ok);
}

int main(void) {
    test_xgrammar_cases();
    test_syntax();
    test_json_string();
    test_formats();
    test_errors();
    test_bounds();
    test_onig_differential();
    test_random();
    TEST_END();
}
