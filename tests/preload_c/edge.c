/* Edge cases of the interposed socket calls, printed one per line as
 * "name: value" so that a run on the kernel and a run under
 * liblinerate_preload.so can be compared line by line. Nothing printed
 * depends on fd numbers, ports or timing beyond the bounds checked here.
 *
 * usage: edge PEER_IP ECHO_PORT RESET_PORT CLOSED_PORT UDP_ECHO_PORT OBSERVE SINK
 * The peer runs a TCP echo server (it echoes until EOF, then closes), a
 * server that resets every connection it accepts, nothing on CLOSED_PORT,
 * a UDP echo server, an observer (below) and a sink that never reads. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static struct sockaddr_in peer;

static const char *en(int e) {
    switch (e) {
    case 0: return "0";
    case EAGAIN: return "EAGAIN";
    case EBADF: return "EBADF";
    case EINPROGRESS: return "EINPROGRESS";
    case EALREADY: return "EALREADY";
    case EISCONN: return "EISCONN";
    case ENOTCONN: return "ENOTCONN";
    case ECONNREFUSED: return "ECONNREFUSED";
    case ECONNRESET: return "ECONNRESET";
    case EPIPE: return "EPIPE";
    case EINVAL: return "EINVAL";
    case EFAULT: return "EFAULT";
    case ENOPROTOOPT: return "ENOPROTOOPT";
    case EDESTADDRREQ: return "EDESTADDRREQ";
    case ENOTSOCK: return "ENOTSOCK";
    case EINTR: return "EINTR";
    default: return "other";
    }
}

/* Prints a call's result: its return value (or -1) and errno. */
#define CHECK(name, call)                                                     \
    do {                                                                      \
        errno = 0;                                                            \
        long r_ = (long)(call);                                               \
        int e_ = errno;                                                       \
        printf("%s: %ld %s\n", name, r_ < 0 ? -1L : r_, r_ < 0 ? en(e_) : "-"); \
    } while (0)

static long ms_since(struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (t1.tv_sec - t0->tv_sec) * 1000 + (t1.tv_nsec - t0->tv_nsec) / 1000000;
}

static struct sockaddr *at(int port) {
    static struct sockaddr_in a;
    a = peer;
    a.sin_port = htons(port);
    return (struct sockaddr *)&a;
}

static volatile sig_atomic_t alarms;
static void on_alarm(int sig) {
    (void)sig;
    alarms++;
}

/* Arms a one-shot SIGALRM in 100 ms. */
static void alarm_soon(void) {
    struct itimerval it = {{0, 0}, {0, 100000}};
    setitimer(ITIMER_REAL, &it, NULL);
}

/* Sends "late" on the socket 300 ms after it starts (after the alarm). */
static void *late_send(void *fd) {
    usleep(300000);
    send(*(int *)fd, "late", 4, 0);
    return NULL;
}

/* `s` alone in each of the three sets of a select. */
static void all_three(int s, fd_set *rd, fd_set *wr, fd_set *ex) {
    FD_ZERO(rd);
    FD_ZERO(wr);
    FD_ZERO(ex);
    FD_SET(s, rd);
    FD_SET(s, wr);
    FD_SET(s, ex);
}

static void print_three(int s, fd_set *rd, fd_set *wr, fd_set *ex) {
    printf("select alone rd %d wr %d ex %d\n", FD_ISSET(s, rd), FD_ISSET(s, wr), FD_ISSET(s, ex));
}

static int connected(int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(s, at(port), sizeof peer) != 0) {
        printf("setup connect failed: %s\n", strerror(errno));
        exit(2);
    }
    return s;
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: edge PEER_IP ECHO RESET CLOSED UDP_ECHO OBSERVE SINK\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    peer.sin_family = AF_INET;
    inet_pton(AF_INET, argv[1], &peer.sin_addr);
    int echo = atoi(argv[2]), reset = atoi(argv[3]), closed = atoi(argv[4]), uecho = atoi(argv[5]);
    int observe = atoi(argv[6]), sink = atoi(argv[7]);
    char buf[256];
    int one = 1;
    socklen_t len;
    int v;

    /* Bad descriptors and arguments. */
    CHECK("read bad fd", read(-1, buf, 1));
    CHECK("close bad fd", close(100000));
    CHECK("getsockopt bad fd", getsockopt(100000, SOL_SOCKET, SO_TYPE, &v, &len));
    int pipefd[2];
    pipe(pipefd);
    CHECK("connect on a pipe", connect(pipefd[0], at(echo), sizeof peer));
    int t = socket(AF_INET, SOCK_STREAM, 0);
    CHECK("bind short address", bind(t, at(0), 3));
    CHECK("connect null address", connect(t, NULL, sizeof peer));
    CHECK("accept unlistened", accept(t, NULL, NULL));
    CHECK("getpeername unconnected", getpeername(t, (struct sockaddr *)buf, &len));
    CHECK("recv unconnected", recv(t, buf, 1, MSG_DONTWAIT));
    close(t);

    /* Non-blocking connect, then SO_ERROR. */
    int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    CHECK("nonblocking connect", connect(s, at(echo), sizeof peer));
    struct pollfd pw = {s, POLLOUT, 0};
    CHECK("poll for the connection", poll(&pw, 1, 5000));
    printf("connected revents POLLOUT: %d\n", !!(pw.revents & POLLOUT));
    len = sizeof v;
    CHECK("SO_ERROR", getsockopt(s, SOL_SOCKET, SO_ERROR, &v, &len));
    printf("SO_ERROR value: %s\n", en(v));
    CHECK("connect again", connect(s, at(echo), sizeof peer));
    CHECK("recv nothing yet", recv(s, buf, sizeof buf, 0));
    CHECK("F_GETFL nonblock", fcntl(s, F_GETFL) & O_NONBLOCK ? 1 : 0);
    CHECK("F_SETFL blocking", fcntl(s, F_SETFL, fcntl(s, F_GETFL) & ~O_NONBLOCK));
    CHECK("F_GETFL blocking", fcntl(s, F_GETFL) & O_NONBLOCK ? 1 : 0);
    CHECK("recv MSG_DONTWAIT", recv(s, buf, sizeof buf, MSG_DONTWAIT));
    CHECK("FIONBIO on", ioctl(s, FIONBIO, &one));
    CHECK("recv after FIONBIO", read(s, buf, sizeof buf));
    CHECK("F_SETFD cloexec", fcntl(s, F_SETFD, FD_CLOEXEC));
    CHECK("F_GETFD", fcntl(s, F_GETFD));

    /* Options. */
    len = sizeof v;
    CHECK("SO_TYPE", getsockopt(s, SOL_SOCKET, SO_TYPE, &v, &len));
    printf("SO_TYPE value: %d len %d\n", v, (int)len);
    len = sizeof v;
    CHECK("SO_DOMAIN", getsockopt(s, SOL_SOCKET, SO_DOMAIN, &v, &len));
    printf("SO_DOMAIN value: %d\n", v);
    CHECK("TCP_NODELAY set", setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
    len = sizeof v;
    CHECK("TCP_NODELAY get", getsockopt(s, IPPROTO_TCP, TCP_NODELAY, &v, &len));
    printf("TCP_NODELAY value: %d\n", v);
    CHECK("SO_KEEPALIVE set", setsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one));
    int idle = 30, zero = 0;
    CHECK("TCP_KEEPIDLE set", setsockopt(s, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle));
    len = sizeof v;
    CHECK("TCP_KEEPIDLE get", getsockopt(s, IPPROTO_TCP, TCP_KEEPIDLE, &v, &len));
    printf("TCP_KEEPIDLE value: %d\n", v);
    CHECK("TCP_KEEPINTVL 0", setsockopt(s, IPPROTO_TCP, TCP_KEEPINTVL, &zero, sizeof zero));
    len = sizeof v;
    CHECK("TCP_KEEPCNT get", getsockopt(s, IPPROTO_TCP, TCP_KEEPCNT, &v, &len));
    printf("TCP_KEEPCNT value: %d\n", v);
    CHECK("unknown option get", getsockopt(s, SOL_SOCKET, 9999, &v, &len));
    CHECK("unknown option set", setsockopt(s, IPPROTO_TCP, 9999, &one, sizeof one));
    CHECK("short option", setsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &one, 2));
    CHECK("null option", setsockopt(s, SOL_SOCKET, SO_KEEPALIVE, NULL, sizeof one));

    /* Data, MSG_PEEK, FIONREAD. */
    CHECK("send", send(s, "hello", 5, 0));
    struct pollfd pr = {s, POLLIN, 0};
    CHECK("poll for the echo", poll(&pr, 1, 5000));
    usleep(100000); /* the whole echo is in */
    CHECK("recv MSG_PEEK", recv(s, buf, 3, MSG_PEEK));
    CHECK("FIONREAD", (ioctl(s, FIONREAD, &v), v));
    CHECK("recv", recv(s, buf, sizeof buf, 0));
    printf("data: %.5s\n", buf);
    CHECK("recv drained", recv(s, buf, sizeof buf, 0));

    /* A poll set mixing the socket with a pipe. */
    write(pipefd[1], "x", 1);
    struct pollfd ps[2] = {{s, POLLIN, 0}, {pipefd[0], POLLIN, 0}};
    CHECK("poll mixed, pipe ready", poll(ps, 2, 1000));
    printf("revents socket %d pipe %d\n", ps[0].revents & POLLIN, ps[1].revents & POLLIN);
    read(pipefd[0], buf, 1);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK("poll mixed, none ready", poll(ps, 2, 50));
    long el = ms_since(&t0);
    printf("poll timeout in [50, 150) ms: %d\n", el >= 50 && el < 150);
    send(s, "ab", 2, 0);
    CHECK("poll mixed, socket ready", poll(ps, 2, 5000));
    printf("revents socket %d pipe %d\n", ps[0].revents & POLLIN, ps[1].revents & POLLIN);
    usleep(50000);
    CHECK("recv echo", recv(s, buf, sizeof buf, 0));

    /* select over the same. */
    fd_set rd;
    FD_ZERO(&rd);
    FD_SET(s, &rd);
    FD_SET(pipefd[0], &rd);
    struct timeval tv = {0, 50000};
    int nfds = (s > pipefd[0] ? s : pipefd[0]) + 1;
    CHECK("select none ready", select(nfds, &rd, NULL, NULL, &tv));
    send(s, "cd", 2, 0);
    FD_ZERO(&rd);
    FD_SET(s, &rd);
    FD_SET(pipefd[0], &rd);
    tv.tv_sec = 5;
    CHECK("select socket ready", select(nfds, &rd, NULL, NULL, &tv));
    printf("select socket %d pipe %d\n", FD_ISSET(s, &rd), FD_ISSET(pipefd[0], &rd));
    fd_set wr;
    FD_ZERO(&wr);
    FD_SET(s, &wr);
    tv.tv_sec = 1;
    CHECK("select writable", select(s + 1, NULL, &wr, NULL, &tv));
    usleep(50000);
    CHECK("recv echo 2", recv(s, buf, sizeof buf, 0));

    /* select and poll over the socket alone: all three sets, zero and long
       timeouts, a negative fd in a poll set. */
    fd_set ex;
    all_three(s, &rd, &wr, &ex);
    tv.tv_sec = 0;
    tv.tv_usec = 0;
    CHECK("select alone, writable, zero timeout", select(s + 1, &rd, &wr, &ex, &tv));
    print_three(s, &rd, &wr, &ex);
    FD_ZERO(&rd);
    FD_SET(s, &rd);
    CHECK("select alone, nothing, zero timeout", select(s + 1, &rd, NULL, NULL, &tv));
    printf("select alone rd %d\n", FD_ISSET(s, &rd));
    send(s, "ef", 2, 0);
    usleep(50000);
    all_three(s, &rd, &wr, &ex);
    tv.tv_sec = 5;
    CHECK("select alone, both", select(s + 1, &rd, &wr, &ex, &tv));
    print_three(s, &rd, &wr, &ex);
    struct pollfd pa[2] = {{-1, POLLIN, 7}, {s, POLLIN | POLLOUT | POLLPRI, 7}};
    CHECK("poll alone, both", poll(pa, 2, 0));
    printf("poll alone revents %d %d\n", pa[0].revents, pa[1].revents);
    pa[1].events = POLLIN;
    CHECK("poll alone, readable", poll(pa, 2, 5000));
    printf("poll alone revents %d %d\n", pa[0].revents, pa[1].revents);
    CHECK("recv echo 3", recv(s, buf, sizeof buf, 0));
    CHECK("poll alone, nothing, zero timeout", poll(pa, 2, 0));
    printf("poll alone revents %d %d\n", pa[0].revents, pa[1].revents);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK("poll alone, nothing, 50 ms", poll(pa, 2, 50));
    el = ms_since(&t0);
    printf("poll alone timeout in [50, 150) ms: %d\n", el >= 50 && el < 150);

    /* epoll: level- and edge-triggered, with a pipe and an eventfd. */
    int ep = epoll_create1(EPOLL_CLOEXEC);
    int ev = eventfd(0, EFD_NONBLOCK);
    struct epoll_event e = {.events = EPOLLIN | EPOLLET, .data.u32 = 1};
    CHECK("epoll add socket", epoll_ctl(ep, EPOLL_CTL_ADD, s, &e));
    e.events = EPOLLIN;
    e.data.u32 = 2;
    CHECK("epoll add pipe", epoll_ctl(ep, EPOLL_CTL_ADD, pipefd[0], &e));
    e.data.u32 = 3;
    CHECK("epoll add eventfd", epoll_ctl(ep, EPOLL_CTL_ADD, ev, &e));
    CHECK("epoll add again", epoll_ctl(ep, EPOLL_CTL_ADD, s, &e));
    struct epoll_event out[4];
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK("epoll_wait none", epoll_wait(ep, out, 4, 50));
    el = ms_since(&t0);
    printf("epoll timeout in [50, 150) ms: %d\n", el >= 50 && el < 150);
    uint64_t one64 = 1;
    write(ev, &one64, 8);
    CHECK("epoll_wait eventfd", epoll_wait(ep, out, 4, 1000));
    printf("ready: %u\n", out[0].data.u32);
    read(ev, &one64, 8);
    send(s, "efgh", 4, 0);
    CHECK("epoll_wait socket", epoll_wait(ep, out, 4, 5000));
    printf("ready: %u\n", out[0].data.u32);
    usleep(50000);
    CHECK("recv 2 of 4", recv(s, buf, 2, 0));
    CHECK("epoll_wait edge gone", epoll_wait(ep, out, 4, 0));
    CHECK("recv 2 more", recv(s, buf, 2, 0));
    CHECK("recv until EAGAIN", recv(s, buf, sizeof buf, 0));
    send(s, "ij", 2, 0);
    CHECK("epoll_wait new edge", epoll_wait(ep, out, 4, 5000));
    usleep(50000);
    CHECK("recv ij", recv(s, buf, sizeof buf, 0));
    CHECK("epoll del socket", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
    close(ep);
    close(ev);

    /* Timeouts, half-close, EPIPE. */
    CHECK("FIONBIO off", ioctl(s, FIONBIO, &(int){0}));
    struct timeval rto = {0, 100000};
    CHECK("SO_RCVTIMEO", setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &rto, sizeof rto));
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK("recv times out", recv(s, buf, sizeof buf, 0));
    el = ms_since(&t0);
    printf("recv timeout in [100, 250) ms: %d\n", el >= 100 && el < 250);
    CHECK("shutdown write", shutdown(s, SHUT_WR));
    CHECK("recv end of stream", recv(s, buf, sizeof buf, 0));
    CHECK("send after shutdown", send(s, "x", 1, MSG_NOSIGNAL));
    CHECK("shutdown bad how", shutdown(s, 7));
    CHECK("close", close(s));
    CHECK("close again", close(s));

    /* Refused and reset. */
    s = socket(AF_INET, SOCK_STREAM, 0);
    CHECK("connect refused", connect(s, at(closed), sizeof peer));
    close(s);
    s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    CHECK("nonblocking connect refused", connect(s, at(closed), sizeof peer));
    pw.fd = s;
    pw.events = POLLOUT;
    CHECK("poll refused", poll(&pw, 1, 5000));
    len = sizeof v;
    getsockopt(s, SOL_SOCKET, SO_ERROR, &v, &len);
    printf("SO_ERROR refused: %s\n", en(v));
    len = sizeof v;
    getsockopt(s, SOL_SOCKET, SO_ERROR, &v, &len);
    printf("SO_ERROR after: %s\n", en(v));
    close(s);
    s = connected(reset);
    CHECK("recv reset", recv(s, buf, sizeof buf, 0));
    close(s);

    /* MSG_WAITALL across two echoes. */
    s = connected(echo);
    send(s, "12", 2, 0);
    usleep(20000);
    send(s, "34", 2, 0);
    CHECK("recv MSG_WAITALL", recv(s, buf, 4, MSG_WAITALL));
    close(s);

    /* UDP. */
    int u = socket(AF_INET, SOCK_DGRAM, 0);
    CHECK("udp send unconnected", send(u, "x", 1, 0));
    CHECK("udp connect", connect(u, at(uecho), sizeof peer));
    CHECK("udp send", send(u, "ping", 4, 0));
    struct pollfd pu = {u, POLLIN, 0};
    CHECK("udp poll", poll(&pu, 1, 5000));
    struct sockaddr_in from;
    len = sizeof from;
    CHECK("udp recvfrom", recvfrom(u, buf, sizeof buf, 0, (struct sockaddr *)&from, &len));
    printf("udp from peer: %d\n", from.sin_addr.s_addr == peer.sin_addr.s_addr && ntohs(from.sin_port) == uecho);
    CHECK("udp recv nothing", recv(u, buf, sizeof buf, MSG_DONTWAIT));
    CHECK("udp send 2", send(u, "pong!", 5, 0));
    CHECK("udp poll 2", poll(&pu, 1, 5000));
    CHECK("udp short buffer", recv(u, buf, 2, MSG_TRUNC));
    struct iovec iov[2] = {{"ab", 2}, {"cde", 3}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
    CHECK("udp sendmsg", sendmsg(u, &mh, 0));
    CHECK("udp poll 3", poll(&pu, 1, 5000));
    char b1[1], b2[8];
    struct iovec riov[2] = {{b1, 1}, {b2, 8}};
    struct msghdr rh = {.msg_iov = riov, .msg_iovlen = 2};
    CHECK("udp recvmsg", recvmsg(u, &rh, 0));
    printf("udp recvmsg data: %c%.4s flags %d\n", b1[0], b2, rh.msg_flags);
    /* sendmmsg and recvmmsg. */
    struct iovec mi[2] = {{"one", 3}, {"three", 5}};
    struct mmsghdr mm[2];
    memset(mm, 0, sizeof mm);
    mm[0].msg_hdr.msg_iov = &mi[0];
    mm[0].msg_hdr.msg_iovlen = 1;
    mm[1].msg_hdr.msg_iov = &mi[1];
    mm[1].msg_hdr.msg_iovlen = 1;
    CHECK("udp sendmmsg", sendmmsg(u, mm, 2, 0));
    printf("sendmmsg lengths %u %u\n", mm[0].msg_len, mm[1].msg_len);
    usleep(100000);
    char r1[16], r2[16];
    struct iovec ri[2] = {{r1, 16}, {r2, 16}};
    memset(mm, 0, sizeof mm);
    mm[0].msg_hdr.msg_iov = &ri[0];
    mm[0].msg_hdr.msg_iovlen = 1;
    mm[1].msg_hdr.msg_iov = &ri[1];
    mm[1].msg_hdr.msg_iovlen = 1;
    CHECK("udp recvmmsg", recvmmsg(u, mm, 2, 0, NULL));
    printf("recvmmsg lengths %u %u: %.3s %.5s\n", mm[0].msg_len, mm[1].msg_len, r1, r2);
    /* recvmmsg looks at its timeout after each message, not while one is
     * awaited: a blocking call whose second message comes after the timeout
     * still waits for it, then writes back that no time is left. */
    CHECK("udp send for recvmmsg", send(u, "a", 1, 0));
    pthread_t lt;
    pthread_create(&lt, NULL, late_send, &u);
    usleep(100000);
    struct timespec tmo = {0, 100000000}, tm0;
    clock_gettime(CLOCK_MONOTONIC, &tm0);
    CHECK("udp recvmmsg timeout after each", recvmmsg(u, mm, 2, 0, &tmo));
    printf("recvmmsg waited for the late one: %d, time left %ld.%09ld, lengths %u %u\n",
           ms_since(&tm0) >= 150, (long)tmo.tv_sec, (long)tmo.tv_nsec, mm[0].msg_len,
           mm[1].msg_len);
    pthread_join(lt, NULL);
    /* MSG_WAITFORONE: the first awaited, the rest taken only if there. */
    CHECK("udp send for waitforone", send(u, "c", 1, 0));
    CHECK("udp poll 4", poll(&pu, 1, 5000));
    CHECK("udp recvmmsg waitforone", recvmmsg(u, mm, 2, MSG_WAITFORONE, NULL));
    /* A zero timeout: one message, though a second one is there. */
    CHECK("udp send d", send(u, "d", 1, 0));
    CHECK("udp send e", send(u, "e", 1, 0));
    usleep(100000);
    struct timespec none_left = {0, 0};
    CHECK("udp recvmmsg zero timeout", recvmmsg(u, mm, 2, 0, &none_left));
    CHECK("udp recv the one left", recv(u, buf, sizeof buf, MSG_DONTWAIT));
    struct timespec bad = {0, 2000000000};
    CHECK("udp recvmmsg bad timeout", recvmmsg(u, mm, 2, 0, &bad));
    close(u);

    /* sendfile from a file to a stream. */
    char path[] = "/tmp/lr-edge-XXXXXX";
    int f = mkstemp(path);
    write(f, "sendfile data", 13);
    unlink(path);
    s = connected(echo);
    off_t off = 4;
    CHECK("sendfile with offset", sendfile(s, f, &off, 100));
    printf("offset after: %ld\n", (long)off);
    lseek(f, 0, SEEK_SET);
    CHECK("sendfile at position", sendfile(s, f, NULL, 4));
    printf("position after: %ld\n", (long)lseek(f, 0, SEEK_CUR));
    CHECK("recv sendfile echo", recv(s, buf, 13, MSG_WAITALL));
    printf("data: %.13s\n", buf);
    close(s);
    close(f);

    /* TCP_INFO after a round trip: the fields Linux fills and linerate has. */
    s = connected(echo);
    v = 1;
    CHECK("TCP_NODELAY on", setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &v, sizeof v));
    CHECK("send for tcp_info", send(s, "info", 4, 0));
    CHECK("recv for tcp_info", recv(s, buf, 4, MSG_WAITALL));
    struct tcp_info ti;
    memset(&ti, 0, sizeof ti);
    len = sizeof ti;
    CHECK("TCP_INFO", getsockopt(s, IPPROTO_TCP, TCP_INFO, &ti, &len));
    printf("tcp_info state %u, mss set %d, rtt set %d, rto set %d, cwnd set %d, sack %d, ts %d, "
           "unacked %u\n",
           ti.tcpi_state, ti.tcpi_snd_mss > 500, ti.tcpi_rtt > 0, ti.tcpi_rto > 0,
           ti.tcpi_snd_cwnd > 0, !!(ti.tcpi_options & TCPI_OPT_SACK),
           !!(ti.tcpi_options & TCPI_OPT_TIMESTAMPS), ti.tcpi_unacked);
    len = 8;
    CHECK("TCP_INFO short", getsockopt(s, IPPROTO_TCP, TCP_INFO, &ti, &len));
    printf("short length %u, state %u\n", len, ti.tcpi_state);
    close(s);

    /* SO_LINGER 0: close resets the connection, which the observer says
     * on the next connection ("reset", where a plain close says "eof"). */
    s = connected(observe);
    CHECK("send before linger", send(s, "x", 1, 0));
    struct linger lg = {1, 0};
    CHECK("SO_LINGER 0", setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof lg));
    close(s);
    s = connected(observe);
    memset(buf, 0, sizeof buf);
    CHECK("observer answers", recv(s, buf, 16, MSG_WAITALL));
    printf("after a zero-linger close the peer saw: %s", buf);
    close(s);
    s = connected(observe);
    close(s);
    s = connected(observe);
    memset(buf, 0, sizeof buf);
    CHECK("observer answers", recv(s, buf, 16, MSG_WAITALL));
    printf("after a plain close the peer saw: %s", buf);
    close(s);

    /* SO_LINGER with a time: close waits until what was sent is
     * acknowledged (quick on an echo connection whose data came back), or
     * for the linger time when it cannot be (a sink that never reads, its
     * window full), and returns 0 either way. */
    s = connected(echo);
    CHECK("send before a timed linger", send(s, "ling", 4, 0));
    CHECK("recv before a timed linger", recv(s, buf, 4, MSG_WAITALL));
    struct linger lg2 = {1, 2};
    CHECK("SO_LINGER 2", setsockopt(s, SOL_SOCKET, SO_LINGER, &lg2, sizeof lg2));
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK("close with everything acknowledged", close(s));
    printf("it returned before the linger time: %d\n", ms_since(&t0) < 1500);
    s = connected(sink);
    fcntl(s, F_SETFL, O_NONBLOCK);
    static char fill[65536];
    long filled = 0, n_;
    struct timespec tf;
    clock_gettime(CLOCK_MONOTONIC, &tf);
    /* Until the sink's window and the send buffer are full (EAGAIN for a
     * while: a window update may still be on its way). */
    while (ms_since(&tf) < 3000) {
        n_ = send(s, fill, sizeof fill, 0);
        if (n_ > 0) {
            filled += n_;
            clock_gettime(CLOCK_MONOTONIC, &tf);
        } else if (errno == EAGAIN) {
            if (ms_since(&tf) > 200)
                break;
            usleep(10000);
        } else {
            break;
        }
    }
    printf("filled the sink: %d\n", filled > 0);
    struct linger lg1 = {1, 1};
    CHECK("SO_LINGER 1", setsockopt(s, SOL_SOCKET, SO_LINGER, &lg1, sizeof lg1));
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK("close with data unacknowledged", close(s));
    long waited = ms_since(&t0);
    printf("it waited the linger time: %d\n", waited >= 900 && waited < 3000);

    /* Signals (signal(7)): a blocking recv interrupted by a handler with
     * SA_RESTART (signal()'s) goes on and gets the data that comes after;
     * one without SA_RESTART fails with EINTR; with SO_RCVTIMEO set it
     * fails with EINTR whatever the handler asks. */
    s = connected(echo);
    signal(SIGALRM, on_alarm);
    alarms = 0;
    alarm_soon();
    pthread_t th;
    pthread_create(&th, NULL, late_send, &s);
    CHECK("recv across a restarting handler", recv(s, buf, 4, MSG_WAITALL));
    pthread_join(th, NULL);
    printf("alarms %d, data %.4s\n", (int)alarms, buf);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    alarm_soon();
    CHECK("recv across a plain handler", recv(s, buf, 4, 0));
    printf("alarms %d\n", (int)alarms);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct timeval rto2 = {2, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &rto2, sizeof rto2);
    alarm_soon();
    CHECK("recv with a timeout across a restarting handler", recv(s, buf, 4, 0));
    printf("alarms %d\n", (int)alarms);
    signal(SIGALRM, SIG_DFL);
    close(s);

    /* fork: the child's new sockets work (under the preload they are the
     * kernel's), and its exit does not wait on the parent's runtime. */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int c = socket(AF_INET, SOCK_STREAM, 0);
        int ok = connect(c, at(echo), sizeof peer) == 0 && send(c, "fork", 4, 0) == 4 &&
                 recv(c, buf, 4, MSG_WAITALL) == 4;
        printf("child echo: %d\n", ok);
        exit(0);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    printf("child exit: %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    printf("done\n");
    return 0;
}
