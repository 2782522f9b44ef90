/* chat.h: what `vllmc chat`'s loop (chat.c) and its --url client of a running server (chat_remote.c) share. */
#ifndef VLLM_CLI_CHAT_H
#define VLLM_CLI_CHAT_H

#include <jansson.h>
#include <stdbool.h>

#include "cli/cli.h"

#define CHAT_CMD "vllmc chat" /* message prefix */

/* Whether Ctrl-C was pressed since the last chat_clear_interrupt (the SIGINT handler's flag). */
bool chat_interrupted(void);
void chat_clear_interrupt(void);

/* What a reply call returns: the turn done, the turn failed (the message printed; the loop goes on), or a
 * failure that ends the chat. */
typedef enum chat_result {
    CHAT_OK = 0,
    CHAT_SKIP = 1,      /* this turn failed (said why); the chat goes on */
    CHAT_FATAL = 2,
    CHAT_TOO_LONG = 3,  /* --url: the server refused the conversation as longer than its context (nothing printed) */
} chat_result;

/* Growable text (s NUL-terminated once something was added); false when out of memory. */
typedef struct chat_buf {
    char *s;
    size_t len, cap;
} chat_buf;

bool chat_buf_add(chat_buf *b, const char *s, size_t n);

typedef struct chat_remote chat_remote;

/* Connects to the server at url (http://HOST:PORT[/v1]): the model is model_name, or the first of GET
 * /v1/models; api_key (NULL: $OPENAI_API_KEY) is sent as Authorization: Bearer. go's sampling options and
 * kwargs (a JSON object, or NULL) go into every request. false (the message printed) when the URL is bad or
 * the server cannot be reached. */
bool chat_remote_open(const char *url, const char *model_name, const char *api_key, const cli_gen_opts *go,
                      const json_t *kwargs, chat_remote **out);
/* POSTs /v1/chat/completions with stream true and messages (the history, ending with the user's turn),
 * writing the reply's deltas to stdout as they arrive and a newline at the end; *reply (malloc'd) is the
 * reply's content (what arrived before a Ctrl-C when interrupted). */
chat_result chat_remote_reply(chat_remote *r, json_t *messages, char **reply);
void chat_remote_free(chat_remote *r);

#endif
