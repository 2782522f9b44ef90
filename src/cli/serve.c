/*
 * serve.c: `vllmc serve MODEL`: loads the model into the async engine,
 * starts the OpenAI-compatible HTTP server (src/server/) and runs until
 * SIGINT / SIGTERM, then shuts down gracefully and exits 0.
 *
 * Flags follow `vllm serve` (vllm/entrypoints/openai/cli_args.py and
 * vllm/engine/arg_utils.py) where they apply; the served model names
 * default to the model path as given (api_server.py, init_app_state), the
 * API key falls back to VLLM_API_KEY, and the chat template comes from
 * --chat-template (a file, or the template text itself, as vLLM's
 * load_chat_template) or the model folder.
 *
 * stdout carries one line, once the server accepts requests:
 *   vllmc: serving MODEL as NAME on http://HOST:PORT
 * (with the real port when --port 0 asked for a free one); logs go to stderr.
 *
 * Shutdown: the signal handler only writes the signal number to a pipe. The
 * main thread then stops accepting, lets in-flight requests finish for up to
 * --shutdown-timeout seconds, aborts the rest (a second signal aborts them at
 * once; their streams end cleanly with finish_reason "abort"), closes the
 * remaining connections and frees the engine.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_hub.h"
#include "server/server.h"
#include "template/chat_template.h"
#include "vllm.h"

int cmd_serve(int argc, char **argv);

#define CMD "vllmc serve" /* message prefix */

static void usage(FILE *f) {
    fprintf(f,
            "usage: vllmc serve MODEL [options]   (or --model MODEL; a folder, a GGUF file or a Hugging Face id)\n\n"
            "An OpenAI-compatible server: /v1/completions, /v1/chat/completions, /v1/models, /tokenize,\n"
            "/detokenize, /health, /ping, /version, /metrics.\n\n"
            "server:\n"
            "  --host H                    bind address (default 127.0.0.1; 0.0.0.0 or :: for all)\n"
            "  --port N                    port (default 8000; 0 = a free port, printed on the ready line)\n"
            "  --served-model-name N...    model names clients may use (default: MODEL as given)\n"
            "  --api-key KEY               require \"Authorization: Bearer KEY\" on /v1/* (repeatable;\n"
            "                              default: $VLLM_API_KEY)\n"
            "  --chat-template T           a chat template file (or the template text); default: the model's\n"
            "  --generation-config auto|vllm  default sampling from generation_config.json (auto) or vLLM's (vllm)\n"
            "  --max-pending N             generation requests in flight before answering 503 (default 1024; 0 = no cap)\n"
            "  --max-body-mb N             request body limit, MiB (default 4; larger bodies get 413)\n"
            "  --max-tokenize-bytes N      /tokenize text (or /detokenize ids) limit, open without --api-key\n"
            "                              as in vLLM (default 1048576; more gets 400)\n"
            "  --max-response-entries N    one request's n x (max_tokens x (1 + logprobs) + prompt tokens x (1 +\n"
            "                              prompt_logprobs)) above N gets 400 (default 1048576; -1 = no cap)\n"
            "  --timeout-keep-alive S      idle keep-alive connections close after S seconds (default 5)\n"
            "  --header-timeout S          request headers not received within S seconds (of the connection's start\n"
            "                              or its previous response) get 408 and the connection closes (default 10)\n"
            "  --request-timeout S         a request body not received within S seconds of its headers gets 408\n"
            "                              (default 30)\n"
            "  --max-connections N         connections at once, each an HTTP thread; more get 503 (default 4096, or\n"
            "                              2 x --max-pending when that is larger; must exceed --max-pending)\n"
            "  --max-connections-per-client N  of them from one client address (an IPv6 /64); more get 503\n"
            "                              (default 1024; 0 = no cap, e.g. behind a proxy)\n"
            "  --shutdown-timeout S        on SIGINT/SIGTERM the server exits within S seconds (default 5): requests\n"
            "                              still running 1 s before (S/2 when S < 2) are aborted (their replies end\n"
            "                              with finish_reason \"abort\"), and at S every connection is closed\n"
            "  --log-level L               debug, info, warning or error (default info; alias --uvicorn-log-level)\n"
            "tools and reasoning:\n"
            "  --enable-auto-tool-choice   serve tool_choice \"auto\" (the default with tools): tool calls parsed out\n"
            "                              of the reply by --tool-call-parser\n"
            "  --tool-call-parser NAME     hermes, qwen3_coder, qwen3_xml, llama3_json, llama4_json, mistral,\n"
            "                              deepseek_v3, deepseek_v31, kimi_k2, openai\n"
            "  --reasoning-parser NAME     the thinking part of the reply as \"reasoning\": qwen3, deepseek_r1,\n"
            "                              deepseek_v3, granite, openai_gptoss\n"
            "  (tool_choice \"required\" and named tools, response_format json_object / json_schema and\n"
            "   structured_outputs json / regex / choice / grammar are forced by the grammar engine)\n"
            "  --responses-store-bytes N   /v1/responses kept for previous_response_id and GET (least recently\n"
            "                              used dropped past N bytes; default 64 MiB, 0 = none stored)\n"
            "engine:\n"
            "  --max-model-len N  --max-num-seqs N  --max-num-batched-tokens N\n"
            "  --enable-prefix-caching / --no-enable-prefix-caching (default on)\n"
            "  --gpu-memory-utilization F (GPU, default 0.9)  --enforce-eager (GPU: no CUDA graphs)\n"
            "  --device cpu|cuda  --num-threads N (alias --threads)  --block-size N (16)\n"
            "  --tensor-parallel-size N (-tp)  the model split over N ranks (the CPU: threads; dense families)\n"
            "  --nnodes N --node-rank R --master-addr A --master-port P   the -tp ranks over N hosts, tp / N each:\n"
            "                              node 0 (this server) listens on P; nodes 1 .. N-1 run the same command with\n"
            "                              their --node-rank and serve no API (headless; --headless is accepted)\n"
            "  --data-parallel-size N (-dp)    N engine replicas behind this server, requests to the least loaded\n"
            "                              (a GPU group of tp each; the CPU: the cores shared out)\n"
            "  --num-kv-blocks N  --kv-cache-memory MiB  --seed S  --load-format auto|dummy\n"
            "  --tokenizer PATH   a tokenizer folder or GGUF file instead of the model's\n"
            "  --revision REV  --tokenizer-revision REV   a Hugging Face id's branch, tag or commit\n"
            "  --mamba-cache-dtype / --mamba-ssm-cache-dtype auto|float32|bfloat16|float16 (hybrid models' states)\n"
            "  --kv-cache-dtype auto|fp8|fp8_e4m3 (FP8 KV cache: per-layer k_scale / v_scale from the checkpoint)\n"
            "  --runner auto|generate|pooling  --convert auto|none|embed   pooling: POST /v1/embeddings (auto: a\n"
            "                              sentence-transformers Pooling module or a *Model architecture)\n"
            "  --pooler-config JSON        {\"pooling_type\": \"LAST\"|\"MEAN\"|\"CLS\", \"use_activation\": bool}\n");
}

/* ---- signals: the handler only writes to a pipe ---- */

static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig) {
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (write(sig_pipe[1], &b, 1) < 0) { /* pipe full: a signal is pending anyway */ }
    errno = saved;
}

static bool install_signals(void) {
    if (pipe(sig_pipe) != 0) return false;
    for (int i = 0; i < 2; i++) {
        int fl = fcntl(sig_pipe[i], F_GETFL);
        fcntl(sig_pipe[i], F_SETFL, fl | O_NONBLOCK);
        fcntl(sig_pipe[i], F_SETFD, FD_CLOEXEC);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0) return false;
    signal(SIGPIPE, SIG_IGN);
    return true;
}

/* Waits up to timeout_ms (< 0: forever) for a signal; its number, or 0. */
static int wait_signal(int timeout_ms) {
    struct pollfd p = {.fd = sig_pipe[0], .events = POLLIN};
    int rc = poll(&p, 1, timeout_ms);
    if (rc <= 0) return 0;
    unsigned char b = 0;
    return read(sig_pipe[0], &b, 1) == 1 ? b : 0;
}

/* ---- chat template and special tokens ---- */

static char *read_text_file(const char *path, size_t limit) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 8192;
            char *t = cap > limit + 1 ? NULL : realloc(s, cap);
            if (!t) {
                free(s);
                fclose(f);
                return NULL;
            }
            s = t;
        }
        size_t n = fread(s + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0) break;
    }
    bool err = ferror(f);
    fclose(f);
    if (err) {
        free(s);
        return NULL;
    }
    s[len] = 0;
    return s;
}

/* tokenizer_config.json's bos_token / eos_token (a string or {"content": ...}); NULL when absent. */
static void read_special_tokens(const char *dir, char **bos, char **eos) {
    *bos = *eos = NULL;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/tokenizer_config.json", dir) >= (int)sizeof path) return;
    json_t *cfg = json_load_file(path, 0, NULL);
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        return;
    }
    const char *keys[2] = {"bos_token", "eos_token"};
    char **outs[2] = {bos, eos};
    for (int i = 0; i < 2; i++) {
        json_t *v = json_object_get(cfg, keys[i]);
        if (json_is_object(v)) v = json_object_get(v, "content");
        if (json_is_string(v)) *outs[i] = strdup(json_string_value(v));
    }
    json_decref(cfg);
}

/* --chat-template: a readable file, else the text itself when it looks like
 * a template (vLLM's load_chat_template); else the model folder's template
 * (none: chat completions answer 400). */
static bool load_template(const char *model, const char *arg, char **tpl, char **bos, char **eos) {
    *tpl = *bos = *eos = NULL;
    char *dir_tpl = NULL, *dir_bos = NULL, *dir_eos = NULL;
    vllm_status st = ct_load_dir(model, &dir_tpl, &dir_bos, &dir_eos);
    if (st != VLLM_OK && st != VLLM_ERR_NOT_FOUND) {
        fprintf(stderr, CMD ": %s\n", vllm_last_error());
        return false;
    }
    if (st == VLLM_ERR_NOT_FOUND) read_special_tokens(model, &dir_bos, &dir_eos);
    *bos = dir_bos;
    *eos = dir_eos;
    if (!arg) {
        *tpl = dir_tpl;
        if (!dir_tpl)
            fprintf(stderr, CMD ": warning: %s has no chat template: /v1/chat/completions needs --chat-template\n",
                    model);
        return true;
    }
    free(dir_tpl);
    if ((*tpl = read_text_file(arg, 16u << 20))) return true;
    if (strstr(arg, "{{") || strstr(arg, "{%")) {
        *tpl = strdup(arg);
        return *tpl != NULL;
    }
    fprintf(stderr, CMD ": --chat-template %s: cannot read the file (%s)\n", arg, strerror(errno));
    return false;
}

/* ---- options ---- */

/* An integer option's value in [lo, hi] into dst, else a usage error. */
#define INT_ARG(lo, hi, dst)                                                               \
    do {                                                                                   \
        CLI_NEED_VALUE(CMD);                                                               \
        long long v_;                                                                      \
        if (!cli_parse_int(argv[++i], (lo), (hi), &v_)) {                                  \
            fprintf(stderr, CMD ": %s needs an integer in [%lld, %lld], got '%s'\n", a,    \
                    (long long)(lo), (long long)(hi), argv[i]);                            \
            goto bad;                                                                      \
        }                                                                                  \
        (dst) = v_;                                                                        \
    } while (0)

int cmd_serve(int argc, char **argv) {
    const char *model = NULL, *chat_template_arg = NULL;
    const char **names = NULL, **keys = NULL;
    size_t num_names = 0, num_keys = 0;
    bool keys_given = false, max_conn_given = false;
    vllm_engine_options eo = vllm_engine_default_options();
    server_options so = server_default_options();
    long long body_mb = 4, kv_mib = -1, shutdown_timeout = 5, seed = -1, v;
    char *tpl = NULL, *bos = NULL, *eos = NULL, *hub_model = NULL, *hub_tok = NULL;
    vllm_async_engine *ae = NULL;
    server *srv = NULL;
    int rc = 1;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            free(names);
            free(keys);
            return 0;
        } else if (a[0] != '-') {
            if (model) {
                fprintf(stderr, CMD ": unexpected argument '%s' (the model is %s)\n", a, model);
                goto bad;
            }
            model = a;
        } else if (!strcmp(a, "--model")) { CLI_NEED_VALUE(CMD); model = argv[++i];
        } else if (!strcmp(a, "--host")) { CLI_NEED_VALUE(CMD); so.host = argv[++i];
        } else if (!strcmp(a, "--port")) { INT_ARG(0, 65535, v); so.port = (int)v;
        } else if (!strcmp(a, "--served-model-name")) {
            /* one or more names (vLLM: nargs="+") */
            CLI_NEED_VALUE(CMD);
            while (i + 1 < argc && argv[i + 1][0] != '-') {
                const char **nl = realloc(names, (num_names + 1) * sizeof *nl);
                if (!nl) goto out;
                names = nl;
                names[num_names++] = argv[++i];
            }
            if (num_names == 0) {
                fprintf(stderr, CMD ": --served-model-name needs a name\n");
                goto bad;
            }
        } else if (!strcmp(a, "--api-key")) {
            CLI_NEED_VALUE(CMD);
            keys_given = true; /* even empty ones: --api-key wins over $VLLM_API_KEY */
            if (!argv[i + 1][0]) { /* an empty key is no key (vLLM drops them) */
                i++;
                continue;
            }
            const char **nk = realloc(keys, (num_keys + 1) * sizeof *nk);
            if (!nk) goto out;
            keys = nk;
            keys[num_keys++] = argv[++i];
        } else if (!strcmp(a, "--chat-template")) { CLI_NEED_VALUE(CMD); chat_template_arg = argv[++i];
        } else if (!strcmp(a, "--generation-config")) {
            CLI_NEED_VALUE(CMD);
            const char *g = argv[++i];
            if (!strcmp(g, "auto")) so.use_generation_config = true;
            else if (!strcmp(g, "vllm")) so.use_generation_config = false;
            else {
                fprintf(stderr, CMD ": --generation-config must be auto or vllm (a folder path is not supported)\n");
                goto bad;
            }
        } else if (!strcmp(a, "--log-level") || !strcmp(a, "--uvicorn-log-level")) {
            CLI_NEED_VALUE(CMD);
            const char *l = argv[++i], *env = NULL;
            if (!strcmp(l, "debug") || !strcmp(l, "trace")) env = "debug";
            else if (!strcmp(l, "info")) env = "info";
            else if (!strcmp(l, "warning") || !strcmp(l, "warn")) env = "warn";
            else if (!strcmp(l, "error") || !strcmp(l, "critical")) env = "error";
            else {
                fprintf(stderr, CMD ": --log-level must be debug, info, warning or error\n");
                goto bad;
            }
            setenv("VLLM_LOG_LEVEL", env, 1);
        } else if (cli_is_pooling_arg(a)) { CLI_NEED_VALUE(CMD); if (!cli_pooling_arg(CMD, a, argv[++i], &eo)) goto bad;
        } else if (cli_engine_flag(a, &eo)) { /* --enforce-eager, --[no-]enable-prefix-caching */
        } else if (!strcmp(a, "--gpu-memory-utilization")) {
            CLI_NEED_VALUE(CMD);
            double d;
            if (!cli_parse_float(argv[++i], &d) || !(d > 0.0 && d <= 1.0)) {
                fprintf(stderr, CMD ": --gpu-memory-utilization must be in (0, 1]\n");
                goto bad;
            }
            eo.gpu_memory_utilization = (float)d;
        } else if (!strcmp(a, "--device")) { CLI_NEED_VALUE(CMD); eo.device = argv[++i];
        } else if (!strcmp(a, "--tokenizer")) { CLI_NEED_VALUE(CMD); eo.tokenizer = argv[++i];
        } else if ((v = cli_hub_opt(CMD, argc, argv, &i, &eo)) != 0) { if (v < 0) goto bad;
        } else if (!strcmp(a, "--load-format")) {
            CLI_NEED_VALUE(CMD);
            if (!cli_load_format(CMD, argv[++i], &eo.load_format)) goto bad;
        } else if (cli_is_state_dtype(a)) {
            CLI_NEED_VALUE(CMD);
            if (!cli_state_dtype(CMD, a, argv[++i], &eo)) goto bad;
        } else if (!strcmp(a, "--num-threads") || !strcmp(a, "--threads")) { INT_ARG(0, 4096, v); eo.num_threads = (int)v;
        } else if (!strcmp(a, "--tensor-parallel-size") || !strcmp(a, "-tp")) {
            INT_ARG(1, 64, v);
            eo.tensor_parallel_size = (int)v;
        } else if (!strcmp(a, "--nnodes")) { INT_ARG(1, 64, v); eo.nnodes = (int)v;
        } else if (!strcmp(a, "--node-rank")) { INT_ARG(0, 63, v); eo.node_rank = (int)v;
        } else if (!strcmp(a, "--master-port")) { INT_ARG(1, 65535, v); eo.master_port = (int)v;
        } else if (!strcmp(a, "--master-addr")) { CLI_NEED_VALUE(CMD); eo.master_addr = argv[++i];
        } else if (!strcmp(a, "--headless")) { /* implied by --node-rank > 0 (vLLM's flag, accepted) */
        } else if (!strcmp(a, "--data-parallel-size") || !strcmp(a, "-dp")) {
            INT_ARG(1, 64, v);
            eo.data_parallel_size = (int)v;
        } else if (!strcmp(a, "--block-size")) { INT_ARG(1, 1 << 16, v); eo.block_size = (int)v;
        } else if (!strcmp(a, "--num-kv-blocks")) { INT_ARG(0, INT32_MAX, v); eo.num_kv_blocks = (int)v;
        } else if (!strcmp(a, "--kv-cache-memory")) { INT_ARG(1, 1LL << 30, kv_mib);
        } else if (!strcmp(a, "--max-model-len")) { INT_ARG(1, INT32_MAX, v); eo.max_model_len = (int)v;
        } else if (!strcmp(a, "--max-num-seqs")) { INT_ARG(1, 1 << 20, v); eo.max_num_seqs = (int)v;
        } else if (!strcmp(a, "--max-num-batched-tokens")) { INT_ARG(1, INT32_MAX, v); eo.max_num_batched_tokens = (int)v;
        } else if (!strcmp(a, "--seed")) { INT_ARG(0, INT64_MAX, seed);
        } else if (!strcmp(a, "--max-pending")) { INT_ARG(0, 1 << 20, v); so.max_pending = (int)v;
        } else if (!strcmp(a, "--max-body-mb")) { INT_ARG(1, 1 << 20, body_mb);
        } else if (!strcmp(a, "--max-tokenize-bytes")) { INT_ARG(1, 1LL << 40, v); so.max_tokenize_bytes = (size_t)v;
        } else if (!strcmp(a, "--max-response-entries")) { INT_ARG(-1, INT64_MAX, v); so.max_response_entries = v;
        } else if (!strcmp(a, "--timeout-keep-alive")) { INT_ARG(0, 86400, v); so.timeout_keep_alive = (int)v;
        } else if (!strcmp(a, "--request-timeout")) { INT_ARG(1, 86400, v); so.request_timeout = (int)v;
        } else if (!strcmp(a, "--header-timeout")) { INT_ARG(1, 86400, v); so.header_timeout = (int)v;
        } else if (!strcmp(a, "--max-connections")) { INT_ARG(1, 1 << 20, v); so.max_connections = (int)v; max_conn_given = true;
        } else if (!strcmp(a, "--max-connections-per-client")) { INT_ARG(0, 1 << 20, v); so.max_connections_per_client = (int)v;
        } else if (!strcmp(a, "--shutdown-timeout")) { INT_ARG(0, 86400, shutdown_timeout);
        } else if (!strcmp(a, "--enable-auto-tool-choice")) { so.enable_auto_tool_choice = true;
        } else if (!strcmp(a, "--tool-call-parser")) { CLI_NEED_VALUE(CMD); so.tool_call_parser = argv[++i];
        } else if (!strcmp(a, "--responses-store-bytes")) { INT_ARG(0, 1LL << 40, v); so.responses_store_bytes = (size_t)v;
        } else if (!strcmp(a, "--reasoning-parser")) { CLI_NEED_VALUE(CMD); so.reasoning_parser = argv[++i];
        } else {
            fprintf(stderr, CMD ": unknown option '%s' (vllmc serve --help)\n", a);
            goto bad;
        }
    }
    if (!model) {
        fprintf(stderr, CMD ": give the model folder (vllmc serve MODEL)\n");
        goto bad;
    }
    if (server_check_parsers(so.enable_auto_tool_choice, so.tool_call_parser, so.reasoning_parser) != VLLM_OK) {
        fprintf(stderr, CMD ": %s\n", vllm_last_error()); /* before loading the model, as vLLM checks its args */
        goto bad;
    }
    if (!keys_given) {
        const char *env = getenv("VLLM_API_KEY");
        if (env && *env) {
            keys = malloc(sizeof *keys);
            if (!keys) goto out;
            keys[num_keys++] = env;
        }
    }
    if (num_names == 0) {
        names = malloc(sizeof *names);
        if (!names) goto out;
        names[num_names++] = model;
    }
    if (kv_mib > 0) eo.kv_cache_memory = (size_t)kv_mib << 20;
    if (seed >= 0) eo.seed = (uint64_t)seed;
    so.max_body_bytes = (size_t)body_mb << 20;
    if (!max_conn_given && so.max_pending >= so.max_connections) so.max_connections = 2 * so.max_pending;
    if (!max_conn_given) { /* the default fits the open-file limit (an explicit value that does not is refused) */
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY &&
            rl.rlim_max < (rlim_t)so.max_connections + 256 && rl.rlim_max > 512) {
            int fit = (int)(rl.rlim_max - 256);
            if (fit > so.max_pending) {
                fprintf(stderr, CMD ": the open-file limit (hard %llu) fits %d connections: --max-connections %d\n",
                        (unsigned long long)rl.rlim_max, fit, fit);
                so.max_connections = fit;
            }
        }
    }
    /* a Hugging Face id: served by that name, loaded from the hub cache's snapshot */
    const char *model_id = model;
    if (!cli_hub_resolve(CMD, &model, &eo, false, &hub_model, &hub_tok)) goto out;
    if (eo.nnodes > 1 && eo.node_rank > 0) { /* headless (vLLM's): this host's ranks for node 0's engine */
        fprintf(stderr, "vllmc: node %d of %d: no API server here; joining node 0 at %s:%d\n", eo.node_rank, eo.nnodes,
                eo.master_addr ? eo.master_addr : "127.0.0.1", eo.master_port ? eo.master_port : 29501);
        if (vllm_node_run(model, &eo) != VLLM_OK) {
            fprintf(stderr, CMD ": %s\n", vllm_last_error());
            goto out;
        }
        fprintf(stderr, "vllmc: node %d: node 0 ended the group\n", eo.node_rank);
        rc = 0;
        goto out;
    }
    if (!load_template(eo.tokenizer ? eo.tokenizer : model, chat_template_arg, &tpl, &bos, &eos)) goto out;

    fprintf(stderr, "vllmc: loading %s\n", model);
    double t0 = cli_now();
    if (vllm_async_engine_create(model, &eo, &ae) != VLLM_OK) {
        fprintf(stderr, CMD ": %s\n", vllm_last_error());
        goto out;
    }
    vllm_engine_info info;
    vllm_async_engine_get_info(ae, &info);
    fprintf(stderr, "vllmc: loaded %s (%s) in %.1f s: max_model_len %d, %d KV blocks of %d tokens\n", model,
            info.architecture, cli_now() - t0, info.max_model_len, info.num_kv_blocks, info.block_size);
    for (int e = 1; e < vllm_async_engine_num_engines(ae); e++) { /* data-parallel replicas size theirs apart */
        vllm_engine_info ei;
        vllm_async_engine_get_engine_info(ae, e, &ei);
        fprintf(stderr, "vllmc: data-parallel engine %d: %d KV blocks of %d tokens\n", e, ei.num_kv_blocks,
                ei.block_size);
    }

    if (!install_signals()) {
        fprintf(stderr, CMD ": cannot install signal handlers: %s\n", strerror(errno));
        goto out;
    }
    so.served_model_names = names;
    so.num_served_model_names = num_names;
    so.model_root = model_id;
    so.api_keys = keys;
    so.num_api_keys = num_keys;
    so.chat_template = tpl;
    so.bos_token = bos;
    so.eos_token = eos;
    /* the HTTP threads (one per connection, short-lived) inherit a mask without
     * SIGINT / SIGTERM: the signals go to the long-lived threads */
    sigset_t block, old_mask;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old_mask);
    vllm_status st = server_start(ae, &so, &srv);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    if (st != VLLM_OK) {
        fprintf(stderr, CMD ": %s\n", vllm_last_error());
        goto out;
    }
    const char *host = so.host;
    bool v6 = strchr(host, ':') != NULL;
    printf("vllmc: serving %s as %s on http://%s%s%s:%d\n", model_id, names[0], v6 ? "[" : "", host, v6 ? "]" : "",
           server_port(srv));
    fflush(stdout);

    int sig = 0;
    while (!(sig = wait_signal(-1))) {
    }
    fprintf(stderr, "vllmc: %s: shutting down within %lld s (%d requests in flight; signal again to abort them)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", shutdown_timeout, server_in_flight(srv));
    server_begin_shutdown(srv);
    /* the whole shutdown takes at most --shutdown-timeout: requests still running a grace
     * before it are aborted (clients that read get a well-formed end); at it, every connection
     * is closed, so threads blocked on clients that never read return at once */
    double t_stop = cli_now(), grace = shutdown_timeout >= 2 ? 1.0 : 0.5 * (double)shutdown_timeout;
    double t_end = t_stop + (double)shutdown_timeout;
    bool aborted = false;
    for (;;) {
        int n = server_in_flight(srv);
        if (n == 0) break;
        double now = cli_now();
        if (!aborted && now >= t_end - grace) {
            fprintf(stderr, "vllmc: aborting %d requests still in flight\n", n);
            server_abort_requests(srv);
            aborted = true;
        }
        if (now >= t_end) {
            fprintf(stderr, "vllmc: %d requests did not end: closing their connections\n", n);
            break;
        }
        int left_ms = (int)((t_end - now) * 1000) + 1;
        if (wait_signal(left_ms < 100 ? left_ms : 100) && !aborted) {
            fprintf(stderr, "vllmc: aborting %d requests in flight\n", n);
            server_abort_requests(srv);
            aborted = true;
            t_end = cli_now() + grace; /* a second signal: abort now, close after the grace */
        }
    }
    server_close_connections(srv);
    rc = 0;
    goto out;
bad:
    rc = 2;
out:
    server_free(srv);
    vllm_async_engine_free(ae);
    free(tpl);
    free(hub_model);
    free(hub_tok);
    free(bos);
    free(eos);
    free(names);
    free(keys);
    for (int k = 0; k < 2; k++)
        if (sig_pipe[k] >= 0) close(sig_pipe[k]), sig_pipe[k] = -1;
    if (rc == 0 && srv) fprintf(stderr, "vllmc: server stopped\n");
    return rc;
}
