/*
 * gguf_vocab.c: a tokenizer from a GGUF file's tokenizer.ggml.* metadata (llama.cpp's vocabularies).
 *
 * The metadata is rewritten as the equivalent tokenizer.json + tokenizer_config.json text and loaded
 * with tok_load_json, so a GGUF vocabulary runs through the same engine as a Hugging Face folder.
 * Where llama.cpp (src/llama-vocab.cpp, the reference for these files) and the Python converters
 * differ, llama.cpp is followed:
 *
 *   "gpt2"   byte-level BPE with tokenizer.ggml.merges (ranked by position; a repeated pair keeps its
 *            first rank). tokenizer.ggml.pre names llama.cpp's list of pre-tokenizer regexes, applied
 *            in order, each splitting every piece into its matches and the text between them (HF
 *            Split "Isolated"), then the GPT-2 byte map (ByteLevel without its own regex);
 *            ignore_merges and the default add_bos where llama.cpp sets them.
 *   "llama"  SentencePiece BPE (llama.cpp's SPM tokenizer): merges derived from the scores as
 *            transformers' SentencePiece converter does (every split of a piece into two pieces,
 *            ranked by the piece's score, highest first: the pair llama.cpp merges first), spaces
 *            as U+2581 with one prepended to every text segment when add_space_prefix (llama.cpp
 *            prefixes the text after each special token too, as HF's Prepend does per segment),
 *            byte fallback to <0xNN>; decoding drops that leading space again.
 *
 * Token types (tokenizer.ggml.token_type): control and unknown tokens become special added tokens,
 * user-defined ones non-special added tokens; all are matched on the raw text before the model, as
 * llama.cpp's special-token partition. Tokens llama.cpp recognises by their text (end-of-generation
 * and FIM markers) count as control, as there. Unlike llama.cpp's tokenize(parse_special = false),
 * control-token text in the input is always matched (HF's behaviour, which vLLM's prompts rely on).
 * Decoding: clean_up_tokenization_spaces is off (vLLM's streamed text never cleans up).
 *
 * Not supported (VLLM_ERR_UNSUPPORTED naming the value): the "bert" (WordPiece), "t5" (Unigram),
 * "rwkv", "plamo2", "gemma4" and vocabulary-less models, and the pre-tokenizers that need llama.cpp's
 * custom code (kimi-k2, afmoe) or run on raw UTF-8 (gemma4, sarvam-moe, whitespace, ...).
 */
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "loader/gguf.h"
#include "tokenizer/internal.h"

/* ------------------------------------------------------------------ */
/* llama.cpp's token types and attributes                              */
/* ------------------------------------------------------------------ */

enum { /* tokenizer.ggml.token_type values */
    TT_NORMAL = 1,
    TT_UNKNOWN = 2,
    TT_CONTROL = 3,
    TT_USER_DEFINED = 4,
    TT_UNUSED = 5,
    TT_BYTE = 6,
};

enum { /* llama_token_attr bits */
    A_UNKNOWN = 1 << 0,
    A_UNUSED = 1 << 1,
    A_NORMAL = 1 << 2,
    A_CONTROL = 1 << 3,
    A_USER_DEFINED = 1 << 4,
    A_BYTE = 1 << 5,
    A_LSTRIP = 1 << 7,
    A_RSTRIP = 1 << 8,
};

/* ------------------------------------------------------------------ */
/* Pre-tokenizers (tokenizer.ggml.pre): llama.cpp's regex lists        */
/* ------------------------------------------------------------------ */

/* GPT-2's regex. llama.cpp's string lacks the final "|\s+", but its hand-written splitter for it
 * (unicode_regex_split_custom_gpt2) implements that alternative too. */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define RE_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_LLAMA3                                                                                      \
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|" \
                    "\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                                     \
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|" \
                    "\\s+(?!\\S)|\\s+"
/* deepseek-llm's letter class, as code points (several are canonical singletons such as U+212A
 * KELVIN SIGN, which a normalizing editor would silently replace). */
#define RE_DS_LETTERS                                                                                  \
    "A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}"        \
    "\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}"  \
    "\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}"         \
    "\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"      \
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"      \
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"                 \
    "\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"               \
    "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}"      \
    "\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}"        \
    "\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}"                \
    "\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}"                \
    "\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"       \
    "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"      \
    "\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}" \
    "\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}"
/* CJK ideographs U+4E00-U+9FA5, U+0800-U+4E00, Hangul U+AC00-U+D7FF */
#define RE_DS_CJK "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
/* " ?[^(\s|.,!?…。，、।۔،)]+" */
#define RE_PORO " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"
#define RE_CASE_SPLIT_LOWER "((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+"
#define RE_CASE_SPLIT_UPPER "((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*"

static const char *const PRE_DEFAULT[] = {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]", NULL};
static const char *const PRE_GPT2[] = {RE_GPT2, NULL};
static const char *const PRE_LLAMA3[] = {RE_LLAMA3, NULL};
static const char *const PRE_QWEN2[] = {RE_QWEN2, NULL};
static const char *const PRE_QWEN35[] = {
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
                    "\\s+(?!\\S)|\\s+",
    NULL};
static const char *const PRE_JAIS2[] = {
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
                    "\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|"
                    "\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}",
    NULL};
static const char *const PRE_DEEPSEEK_LLM[] = {
    "[\\r\\n]",
    "\\s?[" RE_DS_LETTERS "]+",
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
    "\\s+$",
    RE_DS_CJK,
    "\\p{N}+",
    NULL};
static const char *const PRE_DEEPSEEK_CODER[] = {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_DS_CJK, "\\p{N}", NULL};
static const char *const PRE_DEEPSEEK3[] = {
    "\\p{N}{1,3}",
    "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const PRE_FALCON[] = {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]", NULL};
static const char *const PRE_STARCODER[] = {"\\p{N}", RE_GPT2, NULL};
static const char *const PRE_PORO[] = {RE_PORO, NULL};
static const char *const PRE_VIKING[] = {RE_PORO, "\\p{N}", NULL};
static const char *const PRE_TEKKEN[] = {
    "[^\\r\\n\\p{L}\\p{N}]?" RE_CASE_SPLIT_LOWER "|[^\\r\\n\\p{L}\\p{N}]?" RE_CASE_SPLIT_UPPER
    "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const PRE_CHAMELEON[] = {
    "<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
    "[\\p{P}!-/:-@\\[-`{-~]", RE_GPT2, NULL};
static const char *const PRE_GPT4O[] = {
    "[^\\r\\n\\p{L}\\p{N}]?" RE_CASE_SPLIT_LOWER RE_CONTRACTIONS "?|[^\\r\\n\\p{L}\\p{N}]?" RE_CASE_SPLIT_UPPER
    RE_CONTRACTIONS "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const PRE_TINY_AYA[] = {
    "\\d{1,3}(?=(?:\\d{3})*\\b)",
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" RE_CONTRACTIONS
    "?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" RE_CONTRACTIONS
    "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const PRE_SUPERBPE[] = {"\\p{N}+", "(?=(\\d{3})+(?!\\d))", NULL};
static const char *const PRE_BAILINGMOE[] = {
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const PRE_SEED_CODER[] = {
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const PRE_UFAKZEKA[] = {
    "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", NULL};
static const char *const PRE_LAGUNA[] = {"[^\\n]+|[\\n]+", RE_QWEN2, NULL};
static const char *const PRE_EXAONE_MOE[] = {
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|"
                    "\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const PRE_MINICPM5[] = {
    "\\p{N}{1,3}",
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};

#define PRE_IGNORE_MERGES 1u /* a whole piece that is a token is taken as is */
#define PRE_ADD_BOS 2u       /* add_bos defaults to true */
#define PRE_NO_BOS 4u        /* no default BOS id */

typedef struct gv_pre {
    const char *name;
    const char *const *regexes;
    unsigned flags;
} gv_pre;

/* llama.cpp's tokenizer.ggml.pre names (llama_vocab::impl::load) and their regex lists. */
static const gv_pre g_pres[] = {
    {"default", PRE_DEFAULT, 0},
    {"llama3", PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"llama-v3", PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"llama-bpe", PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"falcon3", PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"falcon-h1", PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"pixtral", PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"midm-2.0", PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"lfm2", PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"jina-v5-nano", PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"dbrx", PRE_LLAMA3, 0},
    {"smaug-bpe", PRE_LLAMA3, 0},
    {"glm4", PRE_LLAMA3, PRE_NO_BOS},
    {"chatglm-bpe", PRE_LLAMA3, PRE_NO_BOS},
    {"jais-2", PRE_JAIS2, 0},
    {"deepseek-llm", PRE_DEEPSEEK_LLM, 0},
    {"deepseek-coder", PRE_DEEPSEEK_CODER, 0},
    {"deepseek-v3", PRE_DEEPSEEK3, 0},
    {"hunyuan-dense", PRE_DEEPSEEK3, 0},
    {"joyai-llm", PRE_DEEPSEEK3, 0},
    {"hy_v4", PRE_DEEPSEEK3, 0},
    {"falcon", PRE_FALCON, 0},
    {"starcoder", PRE_STARCODER, 0},
    {"refact", PRE_STARCODER, 0},
    {"command-r", PRE_STARCODER, 0},
    {"smollm", PRE_STARCODER, 0},
    {"codeshell", PRE_STARCODER, 0},
    {"exaone", PRE_STARCODER, 0},
    {"minerva-7b", PRE_STARCODER, 0},
    {"mellum2", PRE_STARCODER, 0},
    {"gpt-2", PRE_GPT2, 0},
    {"phi-2", PRE_GPT2, 0},
    {"jina-es", PRE_GPT2, 0},
    {"jina-de", PRE_GPT2, 0},
    {"gigachat", PRE_GPT2, 0},
    {"jina-v2-es", PRE_GPT2, 0},
    {"jina-v2-de", PRE_GPT2, 0},
    {"a.x-4.0", PRE_GPT2, 0},
    {"mellum", PRE_GPT2, 0},
    {"modern-bert", PRE_GPT2, 0},
    {"jina-v1-en", PRE_GPT2, 0},
    {"jina-v2-code", PRE_GPT2, 0},
    {"roberta-bpe", PRE_GPT2, 0},
    {"exaone4", PRE_GPT2, 0},
    {"mpt", PRE_GPT2, 0},
    {"olmo", PRE_GPT2, 0},
    {"jais", PRE_GPT2, 0},
    {"trillion", PRE_GPT2, 0},
    {"granite-docling", PRE_GPT2, 0},
    {"qwen2", PRE_QWEN2, 0},
    {"deepseek-r1-qwen", PRE_QWEN2, 0},
    {"kormo", PRE_QWEN2, 0},
    {"f2llmv2", PRE_QWEN2, 0},
    {"megrez", PRE_QWEN2, 0},
    {"stablelm2", PRE_QWEN2, 0},
    {"hunyuan", PRE_QWEN2, 0},
    {"solar-open", PRE_QWEN2, 0},
    {"grok-2", PRE_QWEN2, 0},
    {"qwen35", PRE_QWEN35, 0},
    {"poro-chat", PRE_PORO, 0},
    {"bloom", PRE_PORO, 0},
    {"gpt3-finnish", PRE_PORO, 0},
    {"viking", PRE_VIKING, 0},
    {"tekken", PRE_TEKKEN, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"chameleon", PRE_CHAMELEON, PRE_ADD_BOS},
    {"gpt-4o", PRE_GPT4O, 0},
    {"llama4", PRE_GPT4O, 0},
    {"kanana2", PRE_GPT4O, 0},
    {"talkie", PRE_GPT4O, 0},
    {"minimax-m2", PRE_GPT4O, 0},
    {"tiny_aya", PRE_TINY_AYA, 0},
    {"cohere2moe", PRE_TINY_AYA, 0},
    {"superbpe", PRE_SUPERBPE, 0},
    {"bailingmoe", PRE_BAILINGMOE, 0},
    {"bailingmoe2", PRE_BAILINGMOE, 0},
    {"llada-moe", PRE_BAILINGMOE, 0},
    {"seed-coder", PRE_SEED_CODER, 0},
    {"ufakzeka", PRE_UFAKZEKA, 0},
    {"laguna", PRE_LAGUNA, 0},
    {"exaone-moe", PRE_EXAONE_MOE, 0},
    {"minicpm5", PRE_MINICPM5, PRE_IGNORE_MERGES},
};

/* Pre-tokenizers llama.cpp knows that this loader refuses, and why. */
static const struct {
    const char *name, *why;
} g_pres_refused[] = {
    {"kimi-k2", "llama.cpp splits it with custom code"},
    {"afmoe", "llama.cpp splits its digits with custom code"},
    {"gemma4", "SentencePiece-style BPE on raw UTF-8"},
    {"granite-embed-multi-311m", "SentencePiece-style BPE on raw UTF-8"},
    {"sarvam-moe", "SentencePiece-style BPE on raw UTF-8"},
    {"whitespace", "a whitespace pre-tokenizer without the byte map"},
    {"granite-embed-multi-97m", "not implemented here yet"},
    {"youtu", "not implemented here yet"},
    {"spark2_5", "not implemented here yet"},
};

/* ------------------------------------------------------------------ */
/* Tokens recognised by their text (llama_vocab::impl::load)           */
/* ------------------------------------------------------------------ */

/* End-of-generation markers: llama.cpp makes these control tokens whatever their type. */
static const char *const g_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "[e~[", NULL};

/* FIM markers: the first one found becomes a control token when the file names no id for its role. */
static const struct {
    const char *keys[2];
    const char *texts[9];
} g_fim[] = {
    {{"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"},
     {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>",
      "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL}},
    {{"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"},
     {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>", "<SUF>",
      "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL}},
    {{"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"},
     {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>",
      "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL}},
    {{"tokenizer.ggml.fim_pad_token_id", NULL}, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL}},
    {{"tokenizer.ggml.fim_rep_token_id", NULL},
     {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL}},
    {{"tokenizer.ggml.fim_sep_token_id", NULL}, {"<|file_sep|>", NULL}},
};

/* ------------------------------------------------------------------ */
/* The vocabulary read from the file                                   */
/* ------------------------------------------------------------------ */

typedef enum gv_kind { GV_SPM, GV_BPE } gv_kind;

typedef struct gv {
    const gguf_file *f;
    const char *file;    /* name for messages */
    gv_kind kind;
    const gv_pre *pre;   /* BPE */
    uint32_t n;          /* tokens */
    const char **text;   /* id -> text (the map's NUL-terminated copies) */
    uint32_t *len;
    uint16_t *attr;
    float *score;        /* NULL when the file has no scores */
    tok_strmap map;      /* text -> id */
    int32_t bos, eos, unk;
    bool add_bos, add_eos, add_space_prefix;
} gv;

static vllm_status oom(void) { return vt_error(VLLM_ERR_NO_MEMORY, "tokenizer: out of memory (GGUF vocabulary)"); }

static void gv_free(gv *v) {
    free(v->text);
    free(v->len);
    free(v->attr);
    free(v->score);
    tok_strmap_free(&v->map);
}

static int32_t gv_id(const gv *v, const char *s) { return tok_strmap_get(&v->map, s, strlen(s)); }

/* A string key's value (into the map, not NUL-terminated); *present false when absent. */
static vllm_status get_str(const gguf_file *f, const char *key, const char **s, size_t *len, bool *present) {
    vllm_status err = VLLM_OK;
    *present = gguf_get_str(f, key, s, len, &err);
    return *present ? VLLM_OK : err;
}

static vllm_status get_bool(const gguf_file *f, const char *key, bool *out) {
    vllm_status err = VLLM_OK;
    bool v;
    if (gguf_get_bool(f, key, &v, &err)) *out = v;
    return err;
}

static bool str_eq(const char *s, size_t len, const char *lit) { return strlen(lit) == len && !memcmp(s, lit, len); }

/* Which tokenizer tokenizer.ggml.model names; VLLM_ERR_UNSUPPORTED for the ones not handled. */
static vllm_status read_kind(const gguf_file *f, const char *file, gv_kind *kind) {
    const char *m;
    size_t mlen;
    bool present;
    vllm_status st = get_str(f, "tokenizer.ggml.model", &m, &mlen, &present);
    if (st) return st;
    if (!present) return vt_error(VLLM_ERR_FORMAT, "%s: tokenizer.ggml.model missing (no vocabulary)", file);
    int ml = mlen > 64 ? 64 : (int)mlen;
    if (str_eq(m, mlen, "llama")) *kind = GV_SPM;
    else if (str_eq(m, mlen, "gpt2")) *kind = GV_BPE;
    else if (str_eq(m, mlen, "bert"))
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: tokenizer.ggml.model 'bert' (WordPiece) is not supported", file);
    else if (str_eq(m, mlen, "t5"))
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: tokenizer.ggml.model 't5' (Unigram) is not supported", file);
    else if (str_eq(m, mlen, "none") || str_eq(m, mlen, "no_vocab"))
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: tokenizer.ggml.model '%.*s': the file has no vocabulary", file, ml, m);
    else if (str_eq(m, mlen, "rwkv") || str_eq(m, mlen, "plamo2") || str_eq(m, mlen, "gemma4") ||
             str_eq(m, mlen, "hybriddna") || str_eq(m, mlen, "whitespace"))
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: tokenizer.ggml.model '%.*s' is not supported", file, ml, m);
    else
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: unknown tokenizer.ggml.model '%.*s'", file, ml, m);
    return VLLM_OK;
}

static vllm_status read_pre(gv *v, bool warn) {
    const char *p;
    size_t plen;
    bool present;
    vllm_status st = get_str(v->f, "tokenizer.ggml.pre", &p, &plen, &present);
    if (st) return st;
    if (!present) {
        if (warn)
            LOG_W("%s: tokenizer.ggml.pre missing: using llama.cpp's 'default' pre-tokenizer (tokens may differ "
                  "from the model's own tokenizer; consider regenerating the file)", v->file);
        v->pre = &g_pres[0];
        return VLLM_OK;
    }
    for (size_t i = 0; i < sizeof g_pres / sizeof g_pres[0]; i++) {
        if (str_eq(p, plen, g_pres[i].name)) {
            v->pre = &g_pres[i];
            return VLLM_OK;
        }
    }
    int pl = plen > 64 ? 64 : (int)plen;
    for (size_t i = 0; i < sizeof g_pres_refused / sizeof g_pres_refused[0]; i++)
        if (str_eq(p, plen, g_pres_refused[i].name))
            return vt_error(VLLM_ERR_UNSUPPORTED, "%s: tokenizer.ggml.pre '%.*s' is not supported (%s)", v->file, pl, p,
                            g_pres_refused[i].why);
    return vt_error(VLLM_ERR_UNSUPPORTED, "%s: unknown tokenizer.ggml.pre '%.*s'", v->file, pl, p);
}

/* tokenizer.ggml.tokens / scores / token_type. */
static vllm_status read_tokens(gv *v) {
    const gguf_file *f = v->f;
    gguf_type et;
    uint64_t count;
    vllm_status err = VLLM_OK;
    if (!gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &count, &err))
        return err ? err : vt_error(VLLM_ERR_FORMAT, "%s: tokenizer.ggml.tokens missing", v->file);
    if (et != GGUF_TYPE_STRING)
        return vt_error(VLLM_ERR_FORMAT, "%s: tokenizer.ggml.tokens must be an array of strings", v->file);
    if (count == 0) return vt_error(VLLM_ERR_FORMAT, "%s: tokenizer.ggml.tokens is empty", v->file);
    if (count > TOK_MAX_ID)
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: tokenizer.ggml.tokens has %llu entries (at most %d)", v->file,
                        (unsigned long long)count, TOK_MAX_ID);
    uint32_t n = v->n = (uint32_t)count;
    v->text = calloc(n, sizeof *v->text);
    v->len = calloc(n, sizeof *v->len);
    v->attr = calloc(n, sizeof *v->attr);
    if (!v->text || !v->len || !v->attr) return oom();
    vllm_status st = tok_strmap_init(&v->map, n);
    if (st) return st;

    uint64_t n_scores = 0, n_types = 0;
    gguf_type score_t = GGUF_TYPE_COUNT, type_t = GGUF_TYPE_COUNT;
    bool has_scores = gguf_get_arr(f, "tokenizer.ggml.scores", &score_t, &n_scores, &err);
    if (err) return err;
    bool has_types = gguf_get_arr(f, "tokenizer.ggml.token_type", &type_t, &n_types, &err);
    if (err) return err;
    if (has_scores && (score_t == GGUF_TYPE_STRING || score_t == GGUF_TYPE_ARRAY || score_t == GGUF_TYPE_BOOL))
        return vt_error(VLLM_ERR_FORMAT, "%s: tokenizer.ggml.scores must be an array of numbers", v->file);
    if (has_scores && n_scores < n)
        return vt_error(VLLM_ERR_FORMAT, "%s: tokenizer.ggml.scores has %llu entries for %u tokens", v->file,
                        (unsigned long long)n_scores, n);
    if (has_types && (type_t == GGUF_TYPE_STRING || type_t == GGUF_TYPE_ARRAY || type_t == GGUF_TYPE_BOOL ||
                      type_t == GGUF_TYPE_FLOAT32 || type_t == GGUF_TYPE_FLOAT64))
        return vt_error(VLLM_ERR_FORMAT, "%s: tokenizer.ggml.token_type must be an array of integers", v->file);
    if (has_types && n_types < n)
        return vt_error(VLLM_ERR_FORMAT, "%s: tokenizer.ggml.token_type has %llu entries for %u tokens", v->file,
                        (unsigned long long)n_types, n);
    if (has_scores && !(v->score = malloc(n * sizeof *v->score))) return oom();

    size_t n_placeholder = 0;
    char placeholder[48];
    for (uint32_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        if (!gguf_arr_str(f, "tokenizer.ggml.tokens", i, &s, &len))
            return vt_error(VLLM_ERR_FORMAT, "%s: tokenizer.ggml.tokens[%u] unreadable", v->file, i);
        /* llama.cpp names an empty token [EMPTY_i]; text JSON cannot hold (invalid UTF-8, U+0000) gets a
         * placeholder of the same kind, so every id keeps its place. */
        if (len == 0 || !tok_utf8_valid(s, len) || memchr(s, 0, len)) {
            snprintf(placeholder, sizeof placeholder, len ? "[INVALID_UTF8_%u]" : "[EMPTY_%u]", i);
            s = placeholder;
            len = strlen(placeholder);
            n_placeholder++;
        }
        if (len > UINT32_MAX / 2)
            return vt_error(VLLM_ERR_FORMAT, "%s: tokenizer.ggml.tokens[%u] is too long", v->file, i);
        int32_t other = tok_strmap_get(&v->map, s, len);
        if (other >= 0) /* llama.cpp refuses these too */
            return vt_error(VLLM_ERR_FORMAT, "%s: duplicate token in tokenizer.ggml.tokens: '%.*s' has ids %d and %u",
                            v->file, (int)(len > 64 ? 64 : len), s, (int)other, i);
        if ((st = tok_strmap_put(&v->map, s, len, (int32_t)i, &v->text[i]))) return st;
        v->len[i] = (uint32_t)len;
        if (v->score) {
            double d = 0;
            if (!gguf_arr_f64(f, "tokenizer.ggml.scores", i, &d))
                return vt_error(VLLM_ERR_FORMAT, "%s: tokenizer.ggml.scores[%u] unreadable", v->file, i);
            v->score[i] = (float)d;
        }
        uint16_t a = A_NORMAL;
        if (has_types) {
            int64_t t = 0;
            if (!gguf_arr_i64(f, "tokenizer.ggml.token_type", i, &t))
                return vt_error(VLLM_ERR_FORMAT, "%s: tokenizer.ggml.token_type[%u] unreadable", v->file, i);
            switch (t) {
            case TT_NORMAL: a = A_NORMAL; break;
            case TT_UNKNOWN: a = A_UNKNOWN; break;
            case TT_CONTROL: a = A_CONTROL; break;
            case TT_USER_DEFINED: a = A_USER_DEFINED; break;
            case TT_UNUSED: a = A_UNUSED; break;
            case TT_BYTE: a = A_BYTE; break;
            default: a = 0; break; /* undefined */
            }
        }
        v->attr[i] = a;
    }
    if (n_placeholder)
        LOG_W("%s: %zu tokens are empty or not valid UTF-8; they are named [EMPTY_id] / [INVALID_UTF8_id]", v->file,
              n_placeholder);
    return VLLM_OK;
}

/* A token id key: the default when absent, kept (with a warning) when out of range, as llama.cpp. */
static vllm_status read_id(const gv *v, const char *key, int32_t *id, bool *present) {
    vllm_status err = VLLM_OK;
    uint64_t u;
    if (present) *present = false;
    if (*id >= 0 && (uint32_t)*id >= v->n) *id = -1; /* a default outside the vocabulary */
    if (!gguf_get_u64(v->f, key, &u, &err)) return err;
    if (present) *present = true;
    if (u >= v->n) LOG_W("%s: %s = %llu is outside the vocabulary (%u tokens), ignored", v->file, key,
                         (unsigned long long)u, v->n);
    else *id = (int32_t)u;
    return VLLM_OK;
}

/* Special ids and add_bos / add_eos / add_space_prefix, with llama.cpp's defaults. */
static vllm_status read_specials(gv *v) {
    vllm_status st;
    if (v->kind == GV_SPM) { /* llama.cpp's defaults for "llama" */
        v->bos = 1, v->eos = 2, v->unk = 0;
        v->add_bos = true, v->add_eos = false, v->add_space_prefix = true;
    } else { /* ... and for "gpt2" */
        v->bos = (v->pre->flags & PRE_NO_BOS) ? -1 : 11, v->eos = 11, v->unk = -1;
        v->add_bos = (v->pre->flags & PRE_ADD_BOS) != 0, v->add_eos = false, v->add_space_prefix = false;
    }
    if ((st = read_id(v, "tokenizer.ggml.bos_token_id", &v->bos, NULL))) return st;
    if ((st = read_id(v, "tokenizer.ggml.eos_token_id", &v->eos, NULL))) return st;
    if ((st = read_id(v, "tokenizer.ggml.unknown_token_id", &v->unk, NULL))) return st;
    if ((st = get_bool(v->f, "tokenizer.ggml.add_bos_token", &v->add_bos))) return st;
    if ((st = get_bool(v->f, "tokenizer.ggml.add_eos_token", &v->add_eos))) return st;
    if ((st = get_bool(v->f, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix))) return st;
    if (v->add_bos && v->bos < 0)
        return vt_error(VLLM_ERR_FORMAT, "%s: tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id "
                                         "is not set", v->file);
    if (v->add_eos && v->eos < 0)
        return vt_error(VLLM_ERR_FORMAT, "%s: tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id "
                                         "is not set", v->file);
    return VLLM_OK;
}

static bool contains_any(const char *s, size_t len, const char *const *subs) {
    for (; *subs; subs++) {
        size_t k = strlen(*subs);
        for (size_t i = 0; k <= len && i + k <= len; i++)
            if (!memcmp(s + i, *subs, k)) return true;
    }
    return false;
}

/* llama.cpp's attribute rules that go by the tokens' text and the model's name. */
static vllm_status fix_attrs(gv *v) {
    vllm_status st;
    for (const char *const *t = g_eog_texts; *t; t++) {
        int32_t id = gv_id(v, *t);
        if (id >= 0) v->attr[id] |= A_CONTROL;
    }
    for (size_t r = 0; r < sizeof g_fim / sizeof g_fim[0]; r++) {
        int32_t set = -1;
        bool present = false;
        for (int k = 0; k < 2 && g_fim[r].keys[k]; k++) {
            bool p;
            if ((st = read_id(v, g_fim[r].keys[k], &set, &p))) return st;
            present = present || (p && set >= 0);
        }
        if (present) continue;
        int32_t first = -1; /* llama.cpp takes the first its hash map yields: here the lowest id */
        for (size_t k = 0; g_fim[r].texts[k]; k++) {
            int32_t id = gv_id(v, g_fim[r].texts[k]);
            if (id >= 0 && (first < 0 || id < first)) first = id;
        }
        if (first >= 0) v->attr[first] |= A_CONTROL;
    }
    /* gpt-oss: always rendered */
    static const char *const harmony[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", NULL};
    for (const char *const *t = harmony; *t; t++) {
        int32_t id = gv_id(v, *t);
        if (id >= 0) v->attr[id] = A_USER_DEFINED;
    }
    /* o200k_harmony / solar-open: "<|end|>" is not an end-of-generation token there */
    int32_t end = gv_id(v, "<|end|>"), ret = gv_id(v, "<|return|>");
    bool call = gv_id(v, "<|call|>") >= 0 || gv_id(v, "<|calls|>") >= 0, flush = gv_id(v, "<|flush|>") >= 0;
    if (end >= 0 && ((ret >= 0 && call) || (call && flush))) v->attr[end] = A_USER_DEFINED;
    /* gemma4 / paddleocr: "</s>" is a plain token when "<|tool_response>" exists */
    int32_t eos_s = gv_id(v, "</s>");
    if (eos_s >= 0 && gv_id(v, "<|tool_response>") >= 0) v->attr[eos_s] = A_NORMAL;

    /* per-model strip attributes */
    const char *name = NULL, *arch = NULL, *pre = NULL;
    size_t name_len = 0, arch_len = 0, pre_len = 0;
    bool present;
    if ((st = get_str(v->f, "general.name", &name, &name_len, &present))) return st;
    if ((st = get_str(v->f, "general.architecture", &arch, &arch_len, &present))) return st;
    if ((st = get_str(v->f, "tokenizer.ggml.pre", &pre, &pre_len, &present))) return st;
    char lower[256];
    size_t ll = name_len < sizeof lower ? name_len : sizeof lower - 1;
    for (size_t i = 0; i < ll; i++) lower[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] - 'A' + 'a' : name[i]);
    lower[ll] = 0;
    static const char *const jina_pre[] = {"jina-v2-de", "jina-v2-es", "jina-v2-code", NULL};
    static const char *const jina_arch[] = {"nomic-bert-moe", "jina-bert-v3", NULL};
    static const char *const phi3[] = {"phi-3", "phi3", NULL};
    static const char *const modern_bert[] = {"modern-bert", NULL};
    if ((pre && contains_any(pre, pre_len, jina_pre)) || (arch && contains_any(arch, arch_len, jina_arch))) {
        int32_t id = gv_id(v, "<mask>");
        if (id >= 0) v->attr[id] |= A_LSTRIP;
    } else if (contains_any(lower, ll, phi3)) {
        for (uint32_t i = 0; i < v->n; i++)
            if (v->attr[i] & (A_CONTROL | A_USER_DEFINED | A_UNKNOWN)) v->attr[i] |= A_RSTRIP;
        int32_t id = gv_id(v, "</s>");
        if (id >= 0) v->attr[id] |= A_RSTRIP;
        static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>", NULL};
        for (const char *const *t = keep; *t; t++)
            if ((id = gv_id(v, *t)) >= 0) v->attr[id] &= (uint16_t)~A_RSTRIP;
    } else if (contains_any(lower, ll, modern_bert)) {
        int32_t id = gv_id(v, "[MASK]");
        if (id >= 0) v->attr[id] |= A_LSTRIP;
    }
    return VLLM_OK;
}

static vllm_status gv_read(const gguf_file *f, gv *v) {
    memset(v, 0, sizeof *v);
    v->f = f;
    v->file = gguf_file_name(f, 0);
    if (!v->file) v->file = "GGUF file";
    v->bos = v->eos = v->unk = -1;
    vllm_status st = read_kind(f, v->file, &v->kind);
    if (!st && v->kind == GV_BPE) st = read_pre(v, true);
    if (!st) st = read_tokens(v);
    if (!st) st = read_specials(v);
    if (!st) st = fix_attrs(v);
    return st;
}

/* ------------------------------------------------------------------ */
/* JSON text                                                           */
/* ------------------------------------------------------------------ */

static vllm_status put(tok_buf *b, const char *s) { return tok_buf_append(b, s, strlen(s)); }

/* A JSON string (s valid UTF-8 without U+0000). */
static vllm_status put_str(tok_buf *b, const char *s, size_t len) {
    static const char hex[] = "0123456789abcdef";
    vllm_status st = tok_buf_append(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < len && !st; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        st = tok_buf_append(b, s + run, i - run);
        run = i + 1;
        char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
        if (!st) st = c == '"' || c == '\\' ? tok_buf_append(b, (char[]){'\\', (char)c}, 2) : tok_buf_append(b, esc, 6);
    }
    if (!st) st = tok_buf_append(b, s + run, len - run);
    return st ? st : tok_buf_append(b, "\"", 1);
}

static vllm_status put_vocab(const gv *v, tok_buf *b) {
    vllm_status st = put(b, "\"vocab\":{");
    char num[24];
    for (uint32_t i = 0; i < v->n && !st; i++) {
        if (i && (st = put(b, ","))) break;
        if ((st = put_str(b, v->text[i], v->len[i]))) break;
        snprintf(num, sizeof num, ":%u", i);
        st = put(b, num);
    }
    return st ? st : put(b, "}");
}

static vllm_status put_merge(tok_buf *b, bool first, const char *l, size_t ll, const char *r, size_t rl) {
    vllm_status st = put(b, first ? "[" : ",[");
    if (!st) st = put_str(b, l, ll);
    if (!st) st = put(b, ",");
    if (!st) st = put_str(b, r, rl);
    return st ? st : put(b, "]");
}

/* tokenizer.ggml.merges ("left right", split at the first space after the first byte as llama.cpp
 * does). A repeated pair keeps its first rank (llama.cpp's emplace); a pair or result outside the
 * vocabulary cannot give a token, and is left out. */
static vllm_status put_bpe_merges(const gv *v, tok_buf *b) {
    const gguf_file *f = v->f;
    gguf_type et;
    uint64_t count;
    vllm_status err = VLLM_OK;
    if (!gguf_get_arr(f, "tokenizer.ggml.merges", &et, &count, &err))
        return err ? err : vt_error(VLLM_ERR_FORMAT, "%s: tokenizer.ggml.merges missing (tokenizer.ggml.model "
                                                     "'gpt2' needs them)", v->file);
    if (et != GGUF_TYPE_STRING)
        return vt_error(VLLM_ERR_FORMAT, "%s: tokenizer.ggml.merges must be an array of strings", v->file);
    tok_pairmap seen;
    vllm_status st = tok_pairmap_init(&seen, count < v->n ? (size_t)count : v->n);
    if (st) return st;
    tok_buf joined = {0};
    size_t skipped = 0, kept = 0;
    st = put(b, "\"merges\":[");
    for (uint64_t i = 0; i < count && !st; i++) {
        const char *s;
        size_t len;
        if (!gguf_arr_str(f, "tokenizer.ggml.merges", i, &s, &len)) {
            st = vt_error(VLLM_ERR_FORMAT, "%s: tokenizer.ggml.merges[%llu] unreadable", v->file, (unsigned long long)i);
            break;
        }
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp) {
            skipped++;
            continue;
        }
        size_t ll = (size_t)(sp - s), rl = len - ll - 1;
        int32_t a = tok_strmap_get(&v->map, s, ll), c = tok_strmap_get(&v->map, sp + 1, rl), r = -1;
        if (a >= 0 && c >= 0) {
            joined.len = 0;
            if ((st = tok_buf_append(&joined, s, ll)) || (st = tok_buf_append(&joined, sp + 1, rl))) break;
            r = tok_strmap_get(&v->map, joined.data, joined.len);
        }
        uint32_t rank;
        int32_t prev;
        if (r < 0 || tok_pairmap_get(&seen, a, c, &rank, &prev)) {
            skipped++;
            continue;
        }
        if ((st = tok_pairmap_put(&seen, a, c, (uint32_t)kept, r))) break;
        st = put_merge(b, kept++ == 0, v->text[a], v->len[a], v->text[c], v->len[c]);
    }
    tok_buf_free(&joined);
    tok_pairmap_free(&seen);
    if (!st && skipped) LOG_D("%s: %zu of %llu merges left out (malformed, repeated or outside the vocabulary)",
                              v->file, skipped, (unsigned long long)count);
    return st ? st : put(b, "]");
}

typedef struct spm_merge {
    float score;
    int32_t piece, left, right;
} spm_merge;

static int spm_merge_cmp(const void *pa, const void *pb) {
    const spm_merge *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1; /* highest score first */
    if (a->piece != b->piece) return a->piece < b->piece ? -1 : 1;
    if (a->left != b->left) return a->left < b->left ? -1 : 1;
    return (a->right > b->right) - (a->right < b->right);
}

/* SentencePiece merges from the scores: every split of a piece (at a character boundary) into two
 * pieces, highest piece score first (ties: piece id, then the parts' ids, as transformers'
 * SentencePieceExtractor orders them). llama.cpp's SPM tokenizer merges the adjacent pair whose
 * concatenation is the best-scored piece, which is this rank order. */
static vllm_status put_spm_merges(const gv *v, tok_buf *b) {
    spm_merge *m = NULL;
    size_t n = 0, cap = 0;
    vllm_status st = VLLM_OK;
    for (uint32_t p = 0; p < v->n && !st; p++) {
        const char *s = v->text[p];
        size_t len = v->len[p];
        float score = v->score ? v->score[p] : 0.0f;
        if (score != score) score = -3.0e38f; /* NaN: last */
        for (size_t k = tok_utf8_char_len(s, len); k < len; k += tok_utf8_char_len(s + k, len - k)) {
            int32_t l = tok_strmap_get(&v->map, s, k), r;
            if (l < 0 || (r = tok_strmap_get(&v->map, s + k, len - k)) < 0) continue;
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 4096;
                spm_merge *g = realloc(m, nc * sizeof *g);
                if (!g) {
                    st = oom();
                    break;
                }
                m = g;
                cap = nc;
            }
            m[n++] = (spm_merge){score, (int32_t)p, l, r};
        }
    }
    if (!st && n) qsort(m, n, sizeof *m, spm_merge_cmp);
    if (!st) st = put(b, "\"merges\":[");
    for (size_t i = 0; i < n && !st; i++)
        st = put_merge(b, i == 0, v->text[m[i].left], v->len[m[i].left], v->text[m[i].right], v->len[m[i].right]);
    free(m);
    return st ? st : put(b, "]");
}

/* added_tokens: control / unknown (special) and user-defined (not special) tokens, matched on the raw
 * text (normalized false), with llama.cpp's lstrip / rstrip attributes. */
static vllm_status put_added(const gv *v, tok_buf *b) {
    vllm_status st = put(b, "\"added_tokens\":[");
    bool first = true;
    char num[160];
    for (uint32_t i = 0; i < v->n && !st; i++) {
        uint16_t a = v->attr[i];
        if (!(a & (A_CONTROL | A_UNKNOWN | A_USER_DEFINED))) continue;
        snprintf(num, sizeof num, "%s{\"id\":%u,\"content\":", first ? "" : ",", i);
        first = false;
        if ((st = put(b, num))) break;
        if ((st = put_str(b, v->text[i], v->len[i]))) break;
        snprintf(num, sizeof num, ",\"single_word\":false,\"lstrip\":%s,\"rstrip\":%s,\"normalized\":false,\"special\":%s}",
                 (a & A_LSTRIP) ? "true" : "false", (a & A_RSTRIP) ? "true" : "false",
                 (a & (A_CONTROL | A_UNKNOWN)) ? "true" : "false");
        st = put(b, num);
    }
    return st ? st : put(b, "]");
}

static bool has_byte_tokens(const gv *v) {
    char name[8];
    for (int c = 0; c < 256; c++) {
        snprintf(name, sizeof name, "<0x%02X>", c);
        if (gv_id(v, name) >= 0) return true;
    }
    return false;
}

/* The tokenizer.json text. */
static vllm_status build_json(const gv *v, tok_buf *b) {
    vllm_status st = put(b, "{\"version\":\"1.0\",");
    if (!st) st = put_added(v, b);
    if (v->kind == GV_BPE) {
        if (!st) st = put(b, ",\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[");
        for (const char *const *re = v->pre->regexes; *re && !st; re++) {
            st = put(b, "{\"type\":\"Split\",\"pattern\":{\"Regex\":");
            if (!st) st = put_str(b, *re, strlen(*re));
            if (!st) st = put(b, "},\"behavior\":\"Isolated\",\"invert\":false},");
        }
        if (!st) st = put(b, "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":false,"
                             "\"use_regex\":false}]},\"post_processor\":null,"
                             "\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":false,"
                             "\"use_regex\":false},\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,"
                             "\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,\"fuse_unk\":false,"
                             "\"byte_fallback\":false,\"ignore_merges\":");
        if (!st) st = put(b, (v->pre->flags & PRE_IGNORE_MERGES) ? "true," : "false,");
        if (!st) st = put_vocab(v, b);
        if (!st) st = put(b, ",");
        if (!st) st = put_bpe_merges(v, b);
    } else {
        const char *prepend = "{\"type\":\"Prepend\",\"prepend\":\"\xE2\x96\x81\"},";
        const char *replace = "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\xE2\x96\x81\"}";
        if (!st) st = put(b, ",\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[");
        if (!st && v->add_space_prefix) st = put(b, prepend);
        if (!st) st = put(b, replace);
        if (!st) st = put(b, "]},\"pre_tokenizer\":null,\"post_processor\":null,"
                             "\"decoder\":{\"type\":\"Sequence\",\"decoders\":["
                             "{\"type\":\"Replace\",\"pattern\":{\"String\":\"\xE2\x96\x81\"},\"content\":\" \"},"
                             "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}");
        if (!st && v->add_space_prefix) st = put(b, ",{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}");
        if (!st) st = put(b, "]},\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":");
        if (!st) st = v->unk >= 0 ? put_str(b, v->text[v->unk], v->len[v->unk]) : put(b, "null");
        if (!st) st = put(b, ",\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,\"fuse_unk\":true,"
                             "\"byte_fallback\":");
        if (!st) st = put(b, has_byte_tokens(v) ? "true," : "false,");
        if (!st) st = put(b, "\"ignore_merges\":false,");
        if (!st) st = put_vocab(v, b);
        if (!st) st = put(b, ",");
        if (!st) st = put_spm_merges(v, b);
    }
    return st ? st : put(b, "}}");
}

/* The tokenizer_config.json text. */
static vllm_status build_config(const gv *v, tok_buf *b) {
    vllm_status st = put(b, "{\"clean_up_tokenization_spaces\":false,\"add_bos_token\":");
    if (!st) st = put(b, v->add_bos ? "true" : "false");
    if (!st) st = put(b, ",\"add_eos_token\":");
    if (!st) st = put(b, v->add_eos ? "true" : "false");
    if (!st && v->bos >= 0) {
        st = put(b, ",\"bos_token\":");
        if (!st) st = put_str(b, v->text[v->bos], v->len[v->bos]);
    }
    if (!st && v->eos >= 0) {
        st = put(b, ",\"eos_token\":");
        if (!st) st = put_str(b, v->text[v->eos], v->len[v->eos]);
    }
    return st ? st : put(b, "}");
}

vllm_status tok_load_gguf(const struct gguf_file *f, tokenizer **out) {
    if (!f || !out) return vt_error(VLLM_ERR_INVALID_ARG, "tok_load_gguf: NULL argument");
    *out = NULL;
    gv v;
    tok_buf json = {0}, cfg = {0};
    vllm_status st = gv_read(f, &v);
    if (!st) st = build_json(&v, &json);
    if (!st) st = build_config(&v, &cfg);
    if (!st) {
        st = tok_load_json(json.data, json.len, cfg.data, cfg.len, out);
        if (st) vt_error_prefix("%s (the tokenizer built from its tokenizer.ggml.* metadata)", v.file);
    }
    tok_buf_free(&json);
    tok_buf_free(&cfg);
    gv_free(&v);
    return st;
}

static vllm_status dup_token(const gguf_file *f, const char *file, int32_t id, char **out) {
    const char *s;
    size_t len;
    if (id < 0) return VLLM_OK;
    if (!gguf_arr_str(f, "tokenizer.ggml.tokens", (uint64_t)id, &s, &len))
        return vt_error(VLLM_ERR_FORMAT, "%s: tokenizer.ggml.tokens[%d] unreadable", file, (int)id);
    return tok_strndup(s, len, out);
}

vllm_status tok_gguf_chat_template(const struct gguf_file *f, char **template_src, char **bos_token,
                                   char **eos_token) {
    if (!f || !template_src || !bos_token || !eos_token)
        return vt_error(VLLM_ERR_INVALID_ARG, "tok_gguf_chat_template: NULL argument");
    *template_src = *bos_token = *eos_token = NULL;
    const char *file = gguf_file_name(f, 0);
    if (!file) file = "GGUF file";
    const char *s;
    size_t len;
    bool present;
    vllm_status st = get_str(f, "tokenizer.chat_template", &s, &len, &present);
    if (!st && present) st = tok_strndup(s, len, template_src);
    /* the bos / eos ids as tok_load_gguf resolves them (the same defaults and range checks) */
    gv v;
    memset(&v, 0, sizeof v);
    v.f = f;
    v.file = file;
    gguf_type et;
    uint64_t count = 0;
    vllm_status err = VLLM_OK;
    if (!st) st = read_kind(f, file, &v.kind);
    if (!st && v.kind == GV_BPE) st = read_pre(&v, false);
    if (!st && !gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &count, &err))
        st = err ? err : vt_error(VLLM_ERR_FORMAT, "%s: tokenizer.ggml.tokens missing", file);
    if (!st && (et != GGUF_TYPE_STRING || count > TOK_MAX_ID))
        st = vt_error(VLLM_ERR_FORMAT, "%s: tokenizer.ggml.tokens must be an array of at most %d strings", file,
                      TOK_MAX_ID);
    v.n = (uint32_t)count;
    v.bos = v.eos = v.unk = -1;
    if (!st) st = read_specials(&v);
    if (!st) st = dup_token(f, file, v.bos, bos_token);
    if (!st) st = dup_token(f, file, v.eos, eos_token);
    if (st) {
        free(*template_src);
        free(*bos_token);
        free(*eos_token);
        *template_src = *bos_token = *eos_token = NULL;
    }
    return st;
}
