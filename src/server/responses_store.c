/* responses_store.c: the Responses API's bounded, thread-safe store of finished responses (responses_store.h). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/responses_store.h"

typedef struct entry {
    char *id, *response, *messages;
    size_t bytes;
    struct entry *hnext;        /* hash chain */
    struct entry *prev, *next;  /* recency list: head = most recent */
} entry;

struct responses_store {
    pthread_mutex_t mu;
    entry **buckets;
    size_t nbuckets;            /* a power of two */
    size_t entries, bytes, max_bytes;
    entry *head, *tail;
};

static uint64_t hash(const char *s) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

responses_store *responses_store_new(size_t max_bytes) {
    if (max_bytes == 0) return NULL;
    responses_store *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->nbuckets = 1024;
    s->buckets = calloc(s->nbuckets, sizeof *s->buckets);
    if (!s->buckets) {
        free(s);
        return NULL;
    }
    s->max_bytes = max_bytes;
    pthread_mutex_init(&s->mu, NULL);
    return s;
}

static void entry_free(entry *e) {
    free(e->id), free(e->response), free(e->messages);
    free(e);
}

void responses_store_free(responses_store *s) {
    if (!s) return;
    for (entry *e = s->head, *n; e; e = n) n = e->next, entry_free(e);
    free(s->buckets);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static entry **slot(responses_store *s, const char *id) {
    entry **p = &s->buckets[hash(id) & (s->nbuckets - 1)];
    while (*p && strcmp((*p)->id, id)) p = &(*p)->hnext;
    return p;
}

static void unlink_lru(responses_store *s, entry *e) {
    if (e->prev) e->prev->next = e->next;
    else s->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else s->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(responses_store *s, entry *e) {
    e->next = s->head;
    e->prev = NULL;
    if (s->head) s->head->prev = e;
    s->head = e;
    if (!s->tail) s->tail = e;
}

/* Unlinks and frees the entry at *p (under the lock). */
static void remove_at(responses_store *s, entry **p) {
    entry *e = *p;
    *p = e->hnext;
    unlink_lru(s, e);
    s->entries--;
    s->bytes -= e->bytes;
    entry_free(e);
}

static void grow(responses_store *s) {
    if (s->entries < s->nbuckets || s->nbuckets > SIZE_MAX / 4 / sizeof(entry *)) return;
    size_t nb = s->nbuckets * 2;
    entry **b = calloc(nb, sizeof *b);
    if (!b) return; /* longer chains, still correct */
    for (size_t i = 0; i < s->nbuckets; i++)
        for (entry *e = s->buckets[i], *n; e; e = n) {
            n = e->hnext;
            size_t k = hash(e->id) & (nb - 1);
            e->hnext = b[k];
            b[k] = e;
        }
    free(s->buckets);
    s->buckets = b;
    s->nbuckets = nb;
}

vllm_status responses_store_put(responses_store *s, const char *id, const char *response, const char *messages) {
    if (!s || !id || !response) return VLLM_ERR_INVALID_ARG;
    entry *e = calloc(1, sizeof *e);
    if (!e) return VLLM_ERR_NO_MEMORY;
    e->id = strdup(id);
    e->response = strdup(response);
    e->messages = strdup(messages ? messages : "[]");
    if (!e->id || !e->response || !e->messages) {
        entry_free(e);
        return VLLM_ERR_NO_MEMORY;
    }
    e->bytes = strlen(e->id) + strlen(e->response) + strlen(e->messages) + sizeof *e;
    pthread_mutex_lock(&s->mu);
    entry **p = slot(s, id);
    if (*p) remove_at(s, p);
    if (e->bytes > s->max_bytes) {
        pthread_mutex_unlock(&s->mu);
        entry_free(e);
        return VLLM_OK;
    }
    while (s->bytes + e->bytes > s->max_bytes && s->tail) remove_at(s, slot(s, s->tail->id));
    p = slot(s, id);
    *p = e;
    push_front(s, e);
    s->entries++;
    s->bytes += e->bytes;
    grow(s);
    pthread_mutex_unlock(&s->mu);
    return VLLM_OK;
}

bool responses_store_get(responses_store *s, const char *id, char **response, char **messages) {
    if (response) *response = NULL;
    if (messages) *messages = NULL;
    if (!s || !id) return false;
    pthread_mutex_lock(&s->mu);
    entry *e = *slot(s, id);
    bool ok = e != NULL;
    if (ok) {
        unlink_lru(s, e);
        push_front(s, e);
        if (response && !(*response = strdup(e->response))) ok = false;
        if (ok && messages && !(*messages = strdup(e->messages))) ok = false;
    }
    pthread_mutex_unlock(&s->mu);
    if (!ok) {
        if (response) free(*response), *response = NULL;
        if (messages) free(*messages), *messages = NULL;
    }
    return ok;
}

bool responses_store_delete(responses_store *s, const char *id) {
    if (!s || !id) return false;
    pthread_mutex_lock(&s->mu);
    entry **p = slot(s, id);
    bool found = *p != NULL;
    if (found) remove_at(s, p);
    pthread_mutex_unlock(&s->mu);
    return found;
}

void responses_store_stats(responses_store *s, size_t *entries, size_t *bytes) {
    *entries = 0, *bytes = 0;
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    *entries = s->entries;
    *bytes = s->bytes;
    pthread_mutex_unlock(&s->mu);
}
