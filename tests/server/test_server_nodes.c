/*
 * test_server_nodes.c: `vllmc serve` over two nodes on one host (issue 18 item 3): node 1 headless
 * (`vllmc serve --node-rank 1`), node 0 the API server with -tp 2 --nnodes 2; a completion gives the tokens of the
 * one-process -tp 2 server; /health is 200, then 503 naming the lost node once node 1's process is killed, and a
 * completion then fails with an OpenAI error (no hang); node 0 still shuts down cleanly; node 1 ends by itself
 * when node 0 ends the group.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "server/test_server_util.h"
#include "test_port.h"

/* One HTTP/1.0 request to 127.0.0.1:port; the status code (0 when no answer) and the body (at most cap - 1). */
static int http(int port, const char *method, const char *path, const char *body, char *out, size_t cap) {
    out[0] = '\0';
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0) close(fd);
        return 0;
    }
    char req[2048];
    const int n = snprintf(req, sizeof req,
                           "%s %s HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s", method,
                           path, body ? strlen(body) : 0, body ? body : "");
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return 0;
    }
    char buf[16384];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof buf - 1 && (r = read(fd, buf + got, sizeof buf - 1 - got)) > 0) got += (size_t)r;
    close(fd);
    buf[got] = '\0';
    int status = 0;
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1) return 0;
    const char *b = strstr(buf, "\r\n\r\n");
    snprintf(out, cap, "%s", b ? b + 4 : "");
    return status;
}

static const char *COMPLETION = "{\"model\":\"stories\",\"prompt\":\"Once upon a time\",\"max_tokens\":8,"
                                "\"temperature\":0,\"ignore_eos\":true}";

/* The completion's text from a /v1/completions body (its "text" value up to the next quote). */
static void completion_text(const char *body, char *text, size_t cap) {
    const char *t = strstr(body, "\"text\":\"");
    const char *e = t ? strchr(t + 8, '"') : NULL;
    snprintf(text, cap, "%.*s", e ? (int)(e - t - 8) : 0, e ? t + 8 : "");
}

/* Node 1 of a two-node -tp 2 group on stories260K (vllmc serve --node-rank 1, headless), stderr to err; its pid. */
static pid_t start_node(int port, const char *err) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "exec \"%s\" serve \"%s\" -tp 2 --nnodes 2 --node-rank 1 --master-port %d --threads 1 "
             "2>\"%s\"", VLLMC_BIN, SRV_MODEL, port, err);
    const pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

int main(void) {
    if (!srv_tmpdir("nodes")) TEST_SKIP("no scratch folder");
    setenv("VLLM_DIST_TIMEOUT", "60", 1);
    char body[16384], want[512], got[512];
    /* the one-process -tp 2 server's completion */
    srv_proc one;
    if (!srv_start(&one, "tp2", "-tp 2 --threads 1", 60)) {
        CHECK_MSG(false, "the -tp 2 server did not start");
        TEST_END();
    }
    CHECK(http(one.port, "POST", "/v1/completions", COMPLETION, body, sizeof body) == 200);
    completion_text(body, want, sizeof want);
    CHECK_MSG(want[0], "no text: %s", body);
    srv_stop_check(&one, false);

    /* node 1 (headless), then node 0 */
    const int port = t_free_port();
    char node_err[300];
    snprintf(node_err, sizeof node_err, "%s/node1.err", g_srv_tmp);
    const pid_t node = start_node(port, node_err);
    CHECK(node > 0);
    char extra[256];
    snprintf(extra, sizeof extra, "-tp 2 --nnodes 2 --master-port %d --threads 1", port);
    srv_proc s;
    if (node <= 0 || !srv_start(&s, "node0", extra, 60)) {
        CHECK_MSG(false, "node 0 did not start");
        if (node > 0) kill(node, SIGKILL), waitpid(node, NULL, 0);
        srv_dump(node_err, "node 1 stderr");
        TEST_END();
    }
    CHECK(http(s.port, "GET", "/health", NULL, body, sizeof body) == 200);
    CHECK(http(s.port, "POST", "/v1/completions", COMPLETION, body, sizeof body) == 200);
    completion_text(body, got, sizeof got);
    CHECK_MSG(!strcmp(got, want), "over two nodes: '%s', one process: '%s'", got, want);
    printf("over two nodes: the text of one process's -tp 2: %s\n", got);

    /* node 1 dies: /health says so, requests fail with an error and do not hang */
    kill(node, SIGKILL);
    waitpid(node, NULL, 0);
    int h = 0;
    for (int i = 0; i < 100 && (h = http(s.port, "GET", "/health", NULL, body, sizeof body)) == 200; i++)
        srv_sleep_ms(50);
    CHECK_MSG(h == 503 && strstr(body, "lost a node"), "/health after node 1 died: %d %s", h, body);
    printf("/health after node 1 died: %d %s\n", h, body);
    const int c = http(s.port, "POST", "/v1/completions", COMPLETION, body, sizeof body);
    CHECK_MSG(c >= 500 && strstr(body, "\"error\""), "a completion after node 1 died: %d %s", c, body);
    srv_stop_check(&s, false);

    /* the group ended by node 0: a node exits 0 by itself */
    const int port2 = t_free_port();
    const pid_t node2 = start_node(port2, node_err);
    snprintf(extra, sizeof extra, "-tp 2 --nnodes 2 --master-port %d --threads 1", port2);
    if (node2 > 0 && srv_start(&s, "node0b", extra, 60)) {
        srv_stop_check(&s, false);
        int st = -1;
        for (int i = 0; i < 200 && waitpid(node2, &st, WNOHANG) == 0; i++) srv_sleep_ms(50);
        CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "node 1 after node 0 stopped: status %d", st);
    } else {
        CHECK_MSG(false, "node 0 (second group) did not start");
    }
    if (node2 > 0 && waitpid(node2, NULL, WNOHANG) == 0) kill(node2, SIGKILL), waitpid(node2, NULL, 0);
    srv_cleanup();
    TEST_END();
}
