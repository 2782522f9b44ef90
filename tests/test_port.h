/* test_port.h: a free TCP port for tests that listen (the multi-host tensor-parallel tests). */
#ifndef VLLM_TEST_PORT_H
#define VLLM_TEST_PORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <unistd.h>

/* A port nobody listens on now, below the kernel's ephemeral range (32768 ..): a port picked there could be taken
 * as some connection's local port before the test listens on it. 0 when none was found. */
static inline int t_free_port(void) {
    static unsigned seed;
    if (!seed) seed = (unsigned)getpid() * 2654435761u;
    for (int tries = 0; tries < 1000; tries++) {
        seed = seed * 1103515245u + 12345u;
        const int port = 20000 + (int)((seed >> 8) % 12000);
        const int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_ANY)};
        const bool ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
        if (fd >= 0) close(fd);
        if (ok) return port;
    }
    return 0;
}

#endif
