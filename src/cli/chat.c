/* chat.c: `vllmc chat`: an interactive multi-turn chat with a model loaded here (or, with --url, a server). */
/*
 * One user turn per line of stdin (a line ending in '\' goes on with the next one); the conversation is
 * rendered with the model's chat template as vllmc serve's chat path renders it (bos_token / eos_token,
 * add_generation_prompt, --chat-template-kwargs), tokenized without special tokens as vLLM's chat, and
 * the reply is streamed to stdout (then a newline) and kept in the history. The history is trimmed to
 * max_model_len minus --max-tokens by dropping the oldest user / assistant pairs (never the system
 * prompt). Commands: /clear, /exit, /quit, /help. With stdin a terminal: a "> " prompt, Ctrl-C aborts
 * the reply being generated, and Ctrl-C twice at the prompt (or Ctrl-D) leaves. Notices go to stderr.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/chat.h"
#include "cli/cli_hub.h"
#include "core/log.h"
#include "vllm.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: vllmc chat (--model DIR|ID | --url http://HOST:PORT[/v1]) [options]\n\n"
            "A multi-turn chat: each line of stdin is a user turn (a line ending in '\\' continues on the next),\n"
            "the reply is streamed to stdout. Commands: /clear (forget the history, keep the system prompt),\n"
            "/exit or /quit (or Ctrl-D), /help. Ctrl-C stops a reply; twice at the prompt, leaves.\n\n"
            "  --model DIR|ID              the model to load, a folder or a Hugging Face id (--revision REV); engine\n"
            "                              options as vllmc generate: --threads, --device, --max-model-len,\n"
            "                              --kv-cache-memory, --tokenizer, --load-format, ...\n"
            "  --url URL                   a running OpenAI-compatible server (http:// only) instead of a model\n"
            "  --model-name NAME           with --url: the model to ask for (default: the first of GET /v1/models)\n"
            "  --api-key KEY               with --url: Authorization: Bearer KEY (default: $OPENAI_API_KEY)\n"
            "  --system-prompt TEXT        a system message first in the conversation\n"
            "  --chat-template T           a chat template file (or the template text); default: the model's\n"
            "  --chat-template-kwargs JSON extra template variables, e.g. '{\"enable_thinking\": false}'\n"
            "  -q, --quick TEXT            send one message, print the reply, exit\n"
            "sampling (as vllmc generate): --max-tokens N (256; also kept free of the history in the context)\n"
            "  --temperature T  --top-p P  --top-k K  --min-p P  --seed S  --min-tokens N  --ignore-eos\n"
            "  --stop S  --stop-token-ids IDS  --include-stop-str-in-output  --no-skip-special-tokens\n"
            "  --presence-penalty P  --frequency-penalty P  --repetition-penalty P  --bad-words W\n"
            "  --allowed-token-ids IDS  --logit-bias ID:VALUE,...\n");
}

static void help_commands(void) {
    fprintf(stderr, "commands:\n"
                    "  /clear   forget the conversation (the system prompt stays)\n"
                    "  /exit    leave (also /quit, Ctrl-D)\n"
                    "  /help    this list\n"
                    "a line ending in '\\' continues on the next line; Ctrl-C stops a reply\n");
}

/* ---- Ctrl-C: the handler only sets a flag ---- */

static volatile sig_atomic_t g_sigint;

static void on_sigint(int sig) {
    (void)sig;
    g_sigint = 1;
}

bool chat_interrupted(void) { return g_sigint != 0; }
void chat_clear_interrupt(void) { g_sigint = 0; }

static void install_sigint(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a read at the prompt returns with EINTR */
    sigaction(SIGINT, &sa, NULL);
}

/* ---- input ---- */

typedef enum in_result { IN_TEXT, IN_EOF, IN_INTR, IN_NOMEM } in_result;

/* One user turn into *text (malloc'd): a line, and the next ones while a line ends in '\' (which
 * becomes a newline). End of input after such a line still gives the text so far. */
static in_result read_turn(char **line, size_t *cap, char **text) {
    char *acc = NULL;
    size_t len = 0;
    *text = NULL;
    for (;;) {
        errno = 0;
        ssize_t n = getline(line, cap, stdin);
        if (n < 0) {
            bool intr = g_sigint || errno == EINTR;
            clearerr(stdin);
            if (intr) {
                free(acc);
                return IN_INTR;
            }
            *text = acc;
            return acc ? IN_TEXT : IN_EOF;
        }
        size_t k = (size_t)n;
        if (k && (*line)[k - 1] == '\n') k--;
        if (k && (*line)[k - 1] == '\r') k--;
        bool more = k && (*line)[k - 1] == '\\';
        if (more) (*line)[k - 1] = '\n';
        char *t = realloc(acc, len + k + 1);
        if (!t) {
            free(acc);
            return IN_NOMEM;
        }
        acc = t;
        memcpy(acc + len, *line, k);
        len += k;
        acc[len] = 0;
        if (!more) {
            *text = acc;
            return IN_TEXT;
        }
    }
}

/* s without leading and trailing spaces equals cmd */
static bool is_command(const char *s, const char *cmd) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(cmd);
    if (strncmp(s, cmd, n)) return false;
    for (s += n; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\n') return false;
    return true;
}

static bool is_blank(const char *s) {
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r') return false;
    return true;
}

/* Appends {"role": role, "content": content}; false when content is not UTF-8 (or out of memory). */
static bool push_message(json_t *hist, const char *role, const char *content) {
    json_t *s = json_string(content);
    if (!s) return false;
    json_t *m = json_pack("{s:s, s:o}", "role", role, "content", s); /* "o": s's reference moves into m */
    return m && json_array_append_new(hist, m) == 0;
}

/* ---- the model loaded here ---- */

typedef struct chat_local {
    vllm_engine *engine;
    vllm_chat_template_options tpl; /* --chat-template, --chat-template-kwargs */
    vllm_sampling_params sp;
    int max_model_len, budget;  /* budget: prompt tokens at most (max_model_len - max_tokens) */
    unsigned long turn;
} chat_local;

/* The conversation as the prompt, rendered as the server's chat path renders it (vllm.h). */
static vllm_status render(const chat_local *L, json_t *msgs, char **out) {
    *out = NULL;
    char *js = json_dumps(msgs, JSON_COMPACT);
    if (!js) return VLLM_ERR_NO_MEMORY;
    vllm_status st = vllm_chat_apply_template(L->engine, js, &L->tpl, out);
    free(js);
    return st;
}

static void template_error(void) {
    const char *msg = vllm_last_error();
    fprintf(stderr, CHAT_CMD ": %s%s\n", strncmp(msg, "chat template: ", 15) ? "chat template: " : "", msg);
}

bool chat_buf_add(chat_buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *t = realloc(b->s, cap);
        if (!t) return false;
        b->s = t;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
    return true;
}

/* The prompt's token ids for msgs; CHAT_SKIP after printing a template or tokenizer error. */
static chat_result prompt_ids(chat_local *L, json_t *msgs, int32_t **ids, size_t *n) {
    char *text = NULL;
    *ids = NULL;
    if (render(L, msgs, &text) != VLLM_OK) {
        template_error();
        return CHAT_SKIP;
    }
    vllm_status st = vllm_tokenize(L->engine, text, false, ids, n);
    free(text);
    if (st != VLLM_OK) {
        fprintf(stderr, CHAT_CMD ": %s\n", vllm_last_error());
        return CHAT_SKIP;
    }
    return CHAT_OK;
}

/* The prompt's token ids for hist, dropping the oldest user / assistant pairs (after the nsys system
 * messages) until it fits the budget; CHAT_SKIP (the history untouched) when even the system prompt and
 * the last user turn alone do not. */
static chat_result fit_prompt(chat_local *L, json_t *hist, size_t nsys, int32_t **ids, size_t *n) {
    chat_result res = prompt_ids(L, hist, ids, n);
    if (res != CHAT_OK || *n <= (size_t)L->budget) return res;
    free(*ids);
    json_t *last = json_array();
    for (size_t i = 0; last && i < nsys; i++) json_array_append(last, json_array_get(hist, i));
    if (!last || json_array_append(last, json_array_get(hist, json_array_size(hist) - 1))) {
        json_decref(last);
        fprintf(stderr, CHAT_CMD ": out of memory\n");
        return CHAT_FATAL;
    }
    res = prompt_ids(L, last, ids, n);
    json_decref(last);
    if (res != CHAT_OK) return res;
    free(*ids);
    *ids = NULL;
    if (*n > (size_t)L->budget) {
        fprintf(stderr,
                CHAT_CMD ": the message does not fit the context of %d tokens: the prompt is %zu tokens, at most %d "
                "(--max-tokens %d kept for the reply): skipped\n",
                L->max_model_len, *n, L->budget, L->sp.max_tokens);
        return CHAT_SKIP;
    }
    size_t dropped = 0;
    do { /* the oldest user turn and its reply (the last turn alone fits: this ends) */
        free(*ids);
        json_array_remove(hist, nsys);
        json_array_remove(hist, nsys);
        dropped++;
        res = prompt_ids(L, hist, ids, n);
    } while (res == CHAT_OK && *n > (size_t)L->budget && json_array_size(hist) >= nsys + 3);
    fprintf(stderr,
            "vllmc: history trimmed: dropped the oldest %zu turn(s) to fit the context of %d tokens (%d for the "
            "prompt, %d for the reply)\n",
            dropped, L->max_model_len, L->budget, L->sp.max_tokens);
    return res;
}

/* Generates the reply to hist (ending with the user's turn), streaming it to stdout. */
static chat_result local_reply(chat_local *L, json_t *hist, size_t nsys, char **reply) {
    *reply = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    chat_result res = fit_prompt(L, hist, nsys, &ids, &n);
    if (res != CHAT_OK) return res;
    char id[48];
    snprintf(id, sizeof id, "chat-%lu", ++L->turn);
    LOG_D("chat: turn %lu: %zu messages, %zu prompt tokens", L->turn, json_array_size(hist), n);
    vllm_prompt p = {.token_ids = ids, .num_token_ids = n};
    if (vllm_engine_add_request(L->engine, id, &p, &L->sp) != VLLM_OK) {
        fprintf(stderr, CHAT_CMD ": %s\n", vllm_last_error());
        free(ids);
        return CHAT_SKIP;
    }
    chat_buf b = {0};
    bool aborted = false, done = false, oom = !chat_buf_add(&b, "", 0);
    while (!done) {
        if (!aborted && chat_interrupted()) {
            vllm_engine_abort_request(L->engine, id); /* the next step reports it finished */
            aborted = true;
        }
        const vllm_request_output *outs;
        size_t num = 0;
        if (vllm_engine_step(L->engine, &outs, &num) != VLLM_OK) {
            fprintf(stderr, CHAT_CMD ": %s\n", vllm_last_error());
            free(ids);
            free(b.s);
            return CHAT_FATAL;
        }
        for (size_t k = 0; k < num; k++) {
            if (strcmp(outs[k].request_id, id)) continue;
            if (outs[k].new_text_len) {
                fwrite(outs[k].new_text, 1, outs[k].new_text_len, stdout);
                fflush(stdout);
                if (!chat_buf_add(&b, outs[k].new_text, outs[k].new_text_len)) oom = true;
            }
            if (outs[k].finish_reason != VLLM_FINISH_NONE) done = true;
        }
        if (!vllm_engine_has_unfinished(L->engine)) done = true;
    }
    free(ids);
    fputc('\n', stdout);
    fflush(stdout);
    if (aborted) fprintf(stderr, CHAT_CMD ": reply stopped (Ctrl-C)\n");
    if (oom) {
        fprintf(stderr, CHAT_CMD ": out of memory\n");
        free(b.s);
        return CHAT_FATAL;
    }
    *reply = b.s;
    return CHAT_OK;
}

/* Loads the engine and checks the chat template (a trial render, before any input is read). */
static bool local_open(chat_local *L, const char *model, const cli_gen_opts *go, json_t *hist) {
    vllm_engine_options eo = go->eo;
    if (go->seed >= 0) eo.seed = (uint64_t)go->seed;
    if (vllm_engine_create(model, &eo, &L->engine) != VLLM_OK) {
        fprintf(stderr, CHAT_CMD ": %s\n", vllm_last_error());
        return false;
    }
    if (!vllm_engine_has_tokenizer(L->engine)) {
        fprintf(stderr, CHAT_CMD ": %s has no tokenizer.json (give --tokenizer)\n", model);
        return false;
    }
    json_t *trial = json_copy(hist);
    char *text = NULL;
    bool ok = trial && push_message(trial, "user", "Hello");
    vllm_status st = ok ? render(L, trial, &text) : VLLM_ERR_NO_MEMORY;
    free(text);
    json_decref(trial);
    if (st == VLLM_ERR_NOT_FOUND || st == VLLM_ERR_IO) {
        fprintf(stderr, CHAT_CMD ": %s%s\n", vllm_last_error(),
                st == VLLM_ERR_NOT_FOUND && !L->tpl.chat_template ? " (give --chat-template FILE or the template text)"
                                                                  : "");
        return false;
    }
    if (st != VLLM_OK) {
        template_error();
        return false;
    }
    L->sp = cli_gen_sampling(go, vllm_engine_default_sampling(L->engine));
    if (vllm_sampling_params_validate(&L->sp) != VLLM_OK) {
        fprintf(stderr, CHAT_CMD ": %s\n", vllm_last_error());
        return false;
    }
    vllm_engine_info info;
    vllm_engine_get_info(L->engine, &info);
    L->max_model_len = info.max_model_len;
    L->budget = info.max_model_len - L->sp.max_tokens;
    if (L->budget < 1) {
        fprintf(stderr, CHAT_CMD ": --max-tokens %d leaves no room for the prompt in the context of %d tokens\n",
                L->sp.max_tokens, info.max_model_len);
        return false;
    }
    return true;
}

static void local_close(chat_local *L) { vllm_engine_free(L->engine); }

/* ---- the command ---- */

int cmd_chat(int argc, char **argv) {
    const char *model = NULL, *url = NULL, *model_name = NULL, *api_key = NULL, *system_prompt = NULL;
    const char *template_arg = NULL, *kwargs_arg = NULL, *quick = NULL;
    cli_gen_opts go;
    cli_gen_opts_init(&go);
    json_t *kwargs = NULL, *hist = NULL;
    chat_local L;
    memset(&L, 0, sizeof L);
    chat_remote *remote = NULL;
    char *line = NULL;
    size_t line_cap = 0;
    int rc = 1;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int taken;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            cli_gen_opts_free(&go);
            return 0;
        } else if (!strcmp(a, "--model")) { CLI_NEED_VALUE(CHAT_CMD); model = argv[++i];
        } else if (!strcmp(a, "--url")) { CLI_NEED_VALUE(CHAT_CMD); url = argv[++i];
        } else if (!strcmp(a, "--model-name")) { CLI_NEED_VALUE(CHAT_CMD); model_name = argv[++i];
        } else if (!strcmp(a, "--api-key")) { CLI_NEED_VALUE(CHAT_CMD); api_key = argv[++i];
        } else if (!strcmp(a, "--system-prompt")) { CLI_NEED_VALUE(CHAT_CMD); system_prompt = argv[++i];
        } else if (!strcmp(a, "--chat-template")) { CLI_NEED_VALUE(CHAT_CMD); template_arg = argv[++i];
        } else if (!strcmp(a, "--chat-template-kwargs")) { CLI_NEED_VALUE(CHAT_CMD); kwargs_arg = argv[++i];
        } else if (!strcmp(a, "--quick") || !strcmp(a, "-q")) { CLI_NEED_VALUE(CHAT_CMD); quick = argv[++i];
        } else if ((taken = cli_hub_opt(CHAT_CMD, argc, argv, &i, &go.eo)) != 0) { /* --[tokenizer-]revision */
            if (taken < 0) goto bad;
        } else if ((taken = cli_gen_opt(CHAT_CMD, argc, argv, &i, &go)) != 0) { /* sampling and engine options */
            if (taken == -1) goto bad;
            if (taken == -2) goto out;
        } else {
            fprintf(stderr, CHAT_CMD ": unknown option '%s' (vllmc chat --help)\n", a);
            goto bad;
        }
    }
    if (!model == !url) {
        fprintf(stderr, CHAT_CMD ": give --model DIR (a model to load) or --url URL (a running server)%s\n",
                model ? ", not both" : "");
        goto bad;
    }
    if (go.n_samples != 1 || go.logprobs_k >= 0) {
        fprintf(stderr, CHAT_CMD ": %s is not supported in a chat\n", go.n_samples != 1 ? "--n" : "--logprobs");
        goto bad;
    }
    if (url && template_arg) {
        fprintf(stderr, CHAT_CMD ": --chat-template goes with --model (a server uses its own: vllmc serve "
                        "--chat-template)\n");
        goto bad;
    }
    if (model && (model_name || api_key)) {
        fprintf(stderr, CHAT_CMD ": %s goes with --url\n", model_name ? "--model-name" : "--api-key");
        goto bad;
    }
    if (kwargs_arg) {
        kwargs = json_loads(kwargs_arg, 0, NULL);
        if (!json_is_object(kwargs)) {
            fprintf(stderr, CHAT_CMD ": --chat-template-kwargs must be a JSON object, got '%s'\n", kwargs_arg);
            goto bad;
        }
    }
    if (!(hist = json_array())) goto out;
    if (system_prompt && !push_message(hist, "system", system_prompt)) {
        fprintf(stderr, CHAT_CMD ": --system-prompt is not valid UTF-8\n");
        goto bad;
    }
    size_t nsys = json_array_size(hist);

    if (url) {
        if (go.engine_given) fprintf(stderr, CHAT_CMD ": engine options are ignored with --url\n");
        if (!chat_remote_open(url, model_name, api_key, &go, kwargs, &remote)) goto out;
    } else {
        L.tpl = vllm_chat_template_default_options();
        L.tpl.chat_template = template_arg;
        L.tpl.chat_template_kwargs_json = kwargs_arg;
        if (!local_open(&L, model, &go, hist)) goto out;
    }

    bool tty = isatty(STDIN_FILENO), interactive = tty && !quick, intr_at_prompt = false;
    if (tty) install_sigint();
    if (interactive) fprintf(stderr, "vllmc chat: %s (/help for commands, /exit or Ctrl-D to leave)\n", url ? url : model);
    for (;;) {
        char *msg = NULL;
        if (quick) {
            if (!(msg = strdup(quick))) goto out;
        } else {
            if (interactive) {
                fputs("> ", stdout);
                fflush(stdout);
            }
            chat_clear_interrupt();
            in_result r = read_turn(&line, &line_cap, &msg);
            if (r == IN_NOMEM) goto out;
            if (r == IN_EOF) {
                if (interactive) fputc('\n', stdout);
                break;
            }
            if (r == IN_INTR) {
                fputc('\n', stdout);
                if (intr_at_prompt) break;
                fprintf(stderr, "(Ctrl-C again, /exit or Ctrl-D to leave)\n");
                intr_at_prompt = true;
                continue;
            }
            intr_at_prompt = false;
            if (is_command(msg, "/exit") || is_command(msg, "/quit")) {
                free(msg);
                break;
            }
            if (is_command(msg, "/clear") || is_command(msg, "/help") || is_blank(msg)) {
                if (is_command(msg, "/help")) help_commands();
                if (is_command(msg, "/clear")) {
                    while (json_array_size(hist) > nsys) json_array_remove(hist, nsys);
                    fprintf(stderr, "vllmc: history cleared\n");
                }
                free(msg);
                continue;
            }
        }
        bool pushed = push_message(hist, "user", msg);
        free(msg);
        if (!pushed) {
            fprintf(stderr, CHAT_CMD ": the message is not valid UTF-8: skipped\n");
            if (quick) goto out;
            continue;
        }
        chat_clear_interrupt();
        char *reply = NULL;
        chat_result res = url ? chat_remote_reply(remote, hist, &reply) : local_reply(&L, hist, nsys, &reply);
        /* --url: the server measures the context; drop the oldest turn pairs until it takes the conversation */
        size_t dropped = 0;
        json_t *trial = NULL; /* the trimmed history, kept only if the server takes it */
        while (res == CHAT_TOO_LONG && json_array_size(trial ? trial : hist) >= (size_t)nsys + 3) {
            if (!trial && !(trial = json_copy(hist))) {
                res = CHAT_FATAL;
                break;
            }
            json_array_remove(trial, (size_t)nsys);
            json_array_remove(trial, (size_t)nsys);
            dropped++;
            res = chat_remote_reply(remote, trial, &reply);
        }
        if (trial && res == CHAT_OK) {
            json_array_clear(hist);
            json_array_extend(hist, trial);
            fprintf(stderr, CHAT_CMD ": history trimmed: dropped the oldest %zu turn(s) to fit the server's context\n",
                    dropped);
        }
        json_decref(trial);
        if (res == CHAT_TOO_LONG) {
            fprintf(stderr, CHAT_CMD ": the message does not fit the server's context even alone: skipped\n");
            res = CHAT_SKIP;
        }
        if (res == CHAT_FATAL) goto out;
        if (res == CHAT_SKIP) {
            json_array_remove(hist, json_array_size(hist) - 1);
            if (quick) goto out;
            continue;
        }
        bool kept = push_message(hist, "assistant", reply);
        free(reply);
        if (!kept) {
            fprintf(stderr, CHAT_CMD ": out of memory\n");
            goto out;
        }
        if (quick) break;
    }
    rc = 0;
    goto out;
bad:
    rc = 2;
out:
    free(line);
    chat_remote_free(remote);
    local_close(&L);
    json_decref(hist);
    json_decref(kwargs);
    cli_gen_opts_free(&go);
    return rc;
}
