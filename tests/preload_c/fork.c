/* A forking server for tests/system_preload_fork.rs, run under the preload.
 *
 *   fork KERNEL_IP KERNEL_PORT BASE CHILDREN
 *
 * The parent listens on BASE and forks CHILDREN children; child i listens
 * on BASE+1+i, child 0 also connects out to KERNEL_IP:KERNEL_PORT (an echo
 * server) and checks the echo of 1 MiB. Every child first tries its
 * inherited copy of the parent's listener (accept must fail with EIO).
 * Then a victim child listens on BASE+50 and waits to be killed; once the
 * parent has reaped it, a late child listens on BASE+60 (on the queue the
 * victim left). Each server serves one connection: lines "N\n" answered
 * with N bytes of pattern(port), until EOF. The parent serves two
 * connections on BASE (the second after the victim was killed).
 * Child 2 also echoes one UDP datagram on BASE+70 ("udp ready PORT").
 * Child 1 also tries to listen on BASE (the parent's port): EADDRINUSE.
 * Lines on stdout: "ready PORT PID", "victim PID", "eio ok", "busy ok",
 * "connect ok", "served PORT", "done". Exit status: failures. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void say(const char *fmt, ...) {
    char b[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    if (n > 0) {
        ssize_t w = write(1, b, (size_t)n);
        (void)w;
    }
}

static unsigned char pattern(unsigned port, size_t i) {
    return (unsigned char)((i % 251) ^ (port & 0xff));
}

static int listener(unsigned port) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 8) != 0) {
        say("listen %u failed: %s\n", port, strerror(errno));
        exit(1);
    }
    say("ready %u %d\n", port, (int)getpid());
    return l;
}

/* Serves one accepted connection: "N\n" requests until EOF. */
static int serve(int l, unsigned port) {
    int c = accept(l, NULL, NULL);
    if (c < 0) {
        say("accept %u: %s\n", port, strerror(errno));
        return 1;
    }
    char line[32];
    size_t have = 0;
    static unsigned char out[65536];
    for (;;) {
        ssize_t n = recv(c, line + have, 1, 0);
        if (n == 0)
            break;
        if (n < 0) {
            say("recv %u: %s\n", port, strerror(errno));
            return 1;
        }
        if (line[have] != '\n') {
            if (++have >= sizeof line - 1)
                return 1;
            continue;
        }
        line[have] = 0;
        have = 0;
        size_t want = strtoul(line, NULL, 10), sent = 0;
        while (sent < want) {
            size_t k = want - sent < sizeof out ? want - sent : sizeof out;
            for (size_t i = 0; i < k; i++)
                out[i] = pattern(port, sent + i);
            ssize_t w = send(c, out, k, MSG_NOSIGNAL);
            if (w <= 0) {
                say("send %u: %s\n", port, strerror(errno));
                return 1;
            }
            sent += (size_t)w;
        }
    }
    close(c);
    say("served %u\n", port);
    return 0;
}

/* 1 MiB to the kernel's echo server, and the echo checked. */
static int connect_out(const char *ip, unsigned port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, ip, &a.sin_addr);
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
        say("connect: %s\n", strerror(errno));
        return 1;
    }
    size_t total = 1 << 20, sent = 0, got = 0;
    static unsigned char buf[65536];
    /* Small enough that the echo never blocks both sides: write all, then read. */
    while (sent < total) {
        size_t k = total - sent < sizeof buf ? total - sent : sizeof buf;
        for (size_t i = 0; i < k; i++)
            buf[i] = pattern(7, sent + i);
        ssize_t w = send(s, buf, k, MSG_NOSIGNAL);
        if (w <= 0) {
            say("send out: %s\n", strerror(errno));
            return 1;
        }
        sent += (size_t)w;
        /* Drain what came back so far. */
        for (;;) {
            ssize_t r = recv(s, buf, sizeof buf, MSG_DONTWAIT);
            if (r <= 0)
                break;
            for (ssize_t i = 0; i < r; i++)
                if (buf[i] != pattern(7, got + (size_t)i)) {
                    say("echo differs at %zu\n", got + (size_t)i);
                    return 1;
                }
            got += (size_t)r;
        }
    }
    shutdown(s, SHUT_WR);
    for (;;) {
        ssize_t r = recv(s, buf, sizeof buf, 0);
        if (r < 0) {
            say("recv out: %s\n", strerror(errno));
            return 1;
        }
        if (r == 0)
            break;
        for (ssize_t i = 0; i < r; i++)
            if (buf[i] != pattern(7, got + (size_t)i)) {
                say("echo differs at %zu\n", got + (size_t)i);
                return 1;
            }
        got += (size_t)r;
    }
    close(s);
    if (got != total) {
        say("echo: %zu of %zu bytes\n", got, total);
        return 1;
    }
    say("connect ok\n");
    return 0;
}

/* Echoes one datagram on UDP `port`. */
static int udp_echo(unsigned port) {
    int u = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (bind(u, (struct sockaddr *)&a, sizeof a) != 0) {
        say("udp bind: %s\n", strerror(errno));
        return 1;
    }
    say("udp ready %u\n", port);
    char buf[2048];
    struct sockaddr_in from;
    socklen_t len = sizeof from;
    ssize_t n = recvfrom(u, buf, sizeof buf, 0, (struct sockaddr *)&from, &len);
    if (n <= 0 || sendto(u, buf, (size_t)n, 0, (struct sockaddr *)&from, len) != n) {
        say("udp echo: %s\n", strerror(errno));
        return 1;
    }
    close(u);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: fork KERNEL_IP KERNEL_PORT BASE CHILDREN\n");
        return 2;
    }
    const char *kip = argv[1];
    unsigned kport = (unsigned)atoi(argv[2]), base = (unsigned)atoi(argv[3]);
    int n = atoi(argv[4]), failures = 0;
    int l = listener(base);
    pid_t kids[16];
    for (int i = 0; i < n && i < 16; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            int bad = 0;
            /* The inherited listener is served in the parent: EIO here. */
            int r = accept4(l, NULL, NULL, SOCK_NONBLOCK);
            if (r == -1 && errno == EIO)
                say("eio ok\n");
            else
                say("inherited accept: %d %s\n", r, strerror(errno)), bad++;
            close(l);
            if (i == 1) {
                /* The parent's port is claimed for its queue: refused here. */
                int b = socket(AF_INET, SOCK_STREAM, 0);
                int one = 1;
                setsockopt(b, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
                struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(base)};
                int rc = bind(b, (struct sockaddr *)&a, sizeof a);
                if (rc == 0)
                    rc = listen(b, 8);
                if (rc == -1 && errno == EADDRINUSE)
                    say("busy ok\n");
                else
                    say("listen on the parent's port: %d %s\n", rc, strerror(errno)), bad++;
                close(b);
            }
            unsigned port = base + 1 + (unsigned)i;
            int mine = listener(port);
            if (i == 0)
                bad += connect_out(kip, kport);
            if (i == 2)
                bad += udp_echo(base + 70);
            bad += serve(mine, port);
            exit(bad);
        }
    }
    pid_t victim = fork();
    if (victim == 0) {
        close(l);
        listener(base + 50);
        for (;;)
            pause();
    }
    say("victim %d\n", (int)victim);
    failures += serve(l, base);
    int st;
    waitpid(victim, &st, 0);
    if (!WIFSIGNALED(st))
        failures++;
    pid_t late = fork();
    if (late == 0) {
        close(l);
        int mine = listener(base + 60);
        exit(serve(mine, base + 60));
    }
    failures += serve(l, base);
    for (int i = 0; i < n && i < 16; i++) {
        waitpid(kids[i], &st, 0);
        failures += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    waitpid(late, &st, 0);
    failures += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    say("done %d\n", failures);
    return failures;
}
