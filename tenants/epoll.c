/*
 * epoll and eventfd, each check printing one line of what it saw, so that a run inside Endo can
 * be compared with a native run: `epoll` runs them all.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t usr1_count;

static void on_usr1(int sig) { (void)sig; usr1_count++; }

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* ret: the call's result, or the errno's name when it failed. */
static const char *ret(int r)
{
	static char buf[64];
	if (r >= 0) {
		snprintf(buf, sizeof buf, "%d", r);
		return buf;
	}
	switch (errno) {
	case EEXIST: return "EEXIST";
	case ENOENT: return "ENOENT";
	case EBADF: return "EBADF";
	case EINVAL: return "EINVAL";
	case EPERM: return "EPERM";
	case ELOOP: return "ELOOP";
	case EINTR: return "EINTR";
	case EAGAIN: return "EAGAIN";
	}
	snprintf(buf, sizeof buf, "errno %d", errno);
	return buf;
}

static int ctl(int ep, int op, int fd, uint32_t events, uint64_t data)
{
	struct epoll_event ev = { .events = events, .data.u64 = data };
	return epoll_ctl(ep, op, fd, &ev);
}

/* wait prints what one epoll_wait returned: its count and each event's bits and data. */
static void wait_line(const char *what, int ep, int timeout)
{
	struct epoll_event evs[8];
	int n = epoll_wait(ep, evs, 8, timeout);
	printf("%s: %s", what, ret(n));
	for (int i = 0; i < n; i++)
		printf(" [%#x %#llx]", evs[i].events, (unsigned long long)evs[i].data.u64);
	printf("\n");
}

/* writer_after forks a child that writes one byte to fd after ms milliseconds. */
static pid_t writer_after(int fd, int ms)
{
	pid_t pid = fork();
	if (pid == 0) {
		sleep_ms(ms);
		write(fd, "x", 1);
		_exit(0);
	}
	return pid;
}

static void reap(pid_t pid)
{
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	char buf[64];

	/* Creation. */
	int ep = epoll_create1(EPOLL_CLOEXEC);
	printf("create1 cloexec: fd ok %d, FD_CLOEXEC %d\n", ep >= 0, (fcntl(ep, F_GETFD) & FD_CLOEXEC) != 0);
	printf("create1 bad flags: %s\n", ret(epoll_create1(1)));
	printf("create size 0: %s\n", ret(epoll_create(0)));
	int ep2 = epoll_create(1);
	printf("create: cloexec %d, flags %#x\n", (fcntl(ep2, F_GETFD) & FD_CLOEXEC) != 0, fcntl(ep2, F_GETFL));

	/* A pipe and an eventfd in one set. */
	int p[2];
	pipe(p);
	int efd = eventfd(0, EFD_NONBLOCK);
	printf("add pipe: %s\n", ret(ctl(ep, EPOLL_CTL_ADD, p[0], EPOLLIN, 0x1111)));
	printf("add eventfd: %s\n", ret(ctl(ep, EPOLL_CTL_ADD, efd, EPOLLIN, 0xdeadbeefcafeULL)));

	/* What /proc shows of them. */
	int fds[2] = { ep, efd };
	for (int i = 0; i < 2; i++) {
		char path[64], link[64];
		snprintf(path, sizeof path, "/proc/self/fd/%d", fds[i]);
		ssize_t n = readlink(path, link, sizeof link - 1);
		link[n > 0 ? n : 0] = 0;
		printf("fd link: %s\n", link);
	}

	/* Errors. */
	printf("add again: %s\n", ret(ctl(ep, EPOLL_CTL_ADD, p[0], EPOLLIN, 0)));
	printf("mod not added: %s\n", ret(ctl(ep, EPOLL_CTL_MOD, p[1], EPOLLOUT, 0)));
	printf("del not added: %s\n", ret(epoll_ctl(ep, EPOLL_CTL_DEL, p[1], NULL)));
	printf("add bad fd: %s\n", ret(ctl(ep, EPOLL_CTL_ADD, 999, EPOLLIN, 0)));
	printf("bad epoll fd: %s\n", ret(ctl(998, EPOLL_CTL_ADD, p[0], EPOLLIN, 0)));
	printf("add self: %s\n", ret(ctl(ep, EPOLL_CTL_ADD, ep, EPOLLIN, 0)));
	printf("not an epoll fd: %s\n", ret(ctl(p[1], EPOLL_CTL_ADD, p[0], EPOLLIN, 0)));
	printf("bad op: %s\n", ret(ctl(ep, 42, p[0], EPOLLIN, 0)));
	int reg = open("/data.txt", O_RDONLY);
	printf("add regular file: %s\n", ret(ctl(ep, EPOLL_CTL_ADD, reg, EPOLLIN, 0)));
	int dir = open("/", O_RDONLY | O_DIRECTORY);
	printf("add directory: %s\n", ret(ctl(ep, EPOLL_CTL_ADD, dir, EPOLLIN, 0)));
	int opath = open("/data.txt", O_PATH);
	printf("add O_PATH fd: %s\n", ret(ctl(ep, EPOLL_CTL_ADD, opath, EPOLLIN, 0)));
	close(opath);
	close(reg);
	close(dir);
	printf("exclusive mod: %s\n", ret(ctl(ep, EPOLL_CTL_MOD, p[0], EPOLLIN | EPOLLEXCLUSIVE, 0)));
	printf("exclusive with oneshot: %s\n", ret(ctl(ep2, EPOLL_CTL_ADD, p[0], EPOLLIN | EPOLLEXCLUSIVE | EPOLLONESHOT, 0)));
	printf("exclusive add: %s\n", ret(ctl(ep2, EPOLL_CTL_ADD, p[0], EPOLLIN | EPOLLEXCLUSIVE, 7)));
	printf("mod exclusive item: %s\n", ret(ctl(ep2, EPOLL_CTL_MOD, p[0], EPOLLIN, 7)));
	printf("del exclusive item: %s\n", ret(epoll_ctl(ep2, EPOLL_CTL_DEL, p[0], NULL)));
	printf("flags accepted: %s\n", ret(ctl(ep2, EPOLL_CTL_ADD, p[0], EPOLLIN | EPOLLPRI | EPOLLRDHUP | EPOLLERR | EPOLLHUP, 8)));
	printf("nest: %s\n", ret(ctl(ep2, EPOLL_CTL_ADD, ep, EPOLLIN, 9)));
	printf("loop: %s\n", ret(ctl(ep, EPOLL_CTL_ADD, ep2, EPOLLIN, 10)));
	epoll_ctl(ep2, EPOLL_CTL_DEL, ep, NULL);
	epoll_ctl(ep2, EPOLL_CTL_DEL, p[0], NULL);

	/* Nothing ready. */
	wait_line("timeout 0", ep, 0);
	wait_line("timeout 50ms", ep, 50);
	struct epoll_event evs[4];
	printf("maxevents 0: %s\n", ret(epoll_wait(ep, evs, 0, 0)));
	printf("wait on a pipe: %s\n", ret(epoll_wait(p[0], evs, 4, 0)));
	struct timespec ts = { 0, 20 * 1000000L };
	printf("pwait2 20ms: %s\n", ret(syscall(SYS_epoll_pwait2, ep, evs, 4, &ts, NULL, 8)));
	printf("pwait 10ms: %s\n", ret(epoll_pwait(ep, evs, 4, 10, NULL)));

	/* A child writes to the pipe after a short sleep: the wait sees it with the pipe's data. */
	pid_t w = writer_after(p[1], 50);
	wait_line("child wrote", ep, -1);
	reap(w);

	/* Level-triggered: the byte is still there. */
	wait_line("level again", ep, 0);

	/* Edge-triggered: reported once after the change, then only for new data. */
	ctl(ep, EPOLL_CTL_MOD, p[0], EPOLLIN | EPOLLET, 0x2222);
	wait_line("edge first", ep, 0);
	wait_line("edge again", ep, 0);
	write(p[1], "y", 1);
	wait_line("edge new data", ep, 0);
	read(p[0], buf, sizeof buf);

	/* One-shot: once, then nothing until MOD arms it again. */
	write(p[1], "z", 1);
	ctl(ep, EPOLL_CTL_MOD, p[0], EPOLLIN | EPOLLONESHOT, 0x3333);
	wait_line("oneshot first", ep, 0);
	write(p[1], "z", 1);
	wait_line("oneshot again", ep, 0);
	ctl(ep, EPOLL_CTL_MOD, p[0], EPOLLIN | EPOLLONESHOT, 0x4444);
	wait_line("oneshot rearmed", ep, 0);
	read(p[0], buf, sizeof buf);
	ctl(ep, EPOLL_CTL_MOD, p[0], EPOLLIN, 0x1111);

	/* The eventfd. */
	uint64_t v = 3;
	write(efd, &v, 8);
	wait_line("eventfd written", ep, 0);
	v = 4;
	write(efd, &v, 8);
	v = 0;
	int r = read(efd, &v, 8);
	printf("eventfd read: %d value %llu\n", r, (unsigned long long)v);
	printf("eventfd empty: %s\n", ret(read(efd, &v, 8)));
	printf("eventfd short read: %s\n", ret(read(efd, &v, 4)));
	wait_line("eventfd drained", ep, 0);

	/* A semaphore eventfd counts down by one. */
	int sem = eventfd(2, EFD_SEMAPHORE | EFD_NONBLOCK | EFD_CLOEXEC);
	printf("semaphore flags %#x cloexec %d\n", fcntl(sem, F_GETFL), (fcntl(sem, F_GETFD) & FD_CLOEXEC) != 0);
	for (int i = 0; i < 3; i++) {
		v = 0;
		int r = read(sem, &v, 8);
		printf("semaphore read %d: %s value %llu\n", i, ret(r), (unsigned long long)v);
	}
	printf("eventfd2 bad flags: %s\n", ret(eventfd(0, 0x4)));

	/* poll sees an eventfd too. */
	v = 1;
	write(sem, &v, 8);
	struct pollfd pfd = { .fd = sem, .events = POLLIN | POLLOUT };
	int pr = poll(&pfd, 1, 0);
	printf("poll eventfd: %d revents %#x\n", pr, pfd.revents);

	/* A blocking eventfd read waits for a child's write. */
	int bfd = eventfd(0, 0);
	pid_t c = fork();
	if (c == 0) {
		sleep_ms(50);
		uint64_t one = 5;
		write(bfd, &one, 8);
		_exit(0);
	}
	v = 0;
	r = read(bfd, &v, 8);
	printf("blocking eventfd read: %d value %llu\n", r, (unsigned long long)v);
	reap(c);

	/* The write end: ready for writing. */
	int epw = epoll_create1(0);
	ctl(epw, EPOLL_CTL_ADD, p[1], EPOLLOUT, 0x5555);
	wait_line("pipe writable", epw, 0);
	close(epw);

	/* Hang-up: the writer is gone. */
	int q[2];
	pipe(q);
	ctl(ep, EPOLL_CTL_ADD, q[0], EPOLLIN, 0x6666);
	close(q[1]);
	wait_line("hangup", ep, 0);
	epoll_ctl(ep, EPOLL_CTL_DEL, q[0], NULL);
	close(q[0]);

	/* Closing the only fd of a file takes it out of the set; a dup keeps it in. */
	pipe(q);
	ctl(ep, EPOLL_CTL_ADD, q[0], EPOLLIN, 0x7777);
	write(q[1], "a", 1);
	int d = dup(q[0]);
	close(q[0]);
	wait_line("closed, dup open", ep, 0);
	printf("del closed fd: %s\n", ret(epoll_ctl(ep, EPOLL_CTL_DEL, q[0], NULL)));
	close(d);
	wait_line("closed, no dup", ep, 0);
	close(q[1]);

	/* The same file under two fds is two items. */
	pipe(q);
	d = dup(q[0]);
	ctl(ep, EPOLL_CTL_ADD, q[0], EPOLLIN, 0x8888);
	printf("add dup of the same file: %s\n", ret(ctl(ep, EPOLL_CTL_ADD, d, EPOLLIN, 0x9999)));
	write(q[1], "b", 1);
	epoll_ctl(ep, EPOLL_CTL_DEL, efd, NULL);
	struct epoll_event two[4];
	int n2 = epoll_wait(ep, two, 4, 0);
	uint64_t sum = 0;
	for (int i = 0; i < n2; i++)
		sum += two[i].data.u64;
	printf("two items: %d sum %#llx\n", n2, (unsigned long long)sum);
	close(q[0]);
	close(d);
	close(q[1]);

	/* A set is shared with a child through fork: the child's wait sees the parent's write. */
	pid_t ch = fork();
	if (ch == 0) {
		wait_line("child's wait", ep, 5000);
		_exit(0);
	}
	sleep_ms(30);
	write(p[1], "w", 1);
	reap(ch);
	read(p[0], buf, sizeof buf);

	/* A signal with a handler interrupts the wait. */
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_usr1;
	sigaction(SIGUSR1, &sa, NULL);
	pid_t parent = getpid();
	pid_t k = fork();
	if (k == 0) {
		sleep_ms(50);
		kill(parent, SIGUSR1);
		_exit(0);
	}
	int wr = epoll_wait(ep, evs, 4, -1);
	printf("signal: %s handled %d\n", ret(wr), (int)usr1_count);
	reap(k);

	/* SA_RESTART does not restart an epoll wait. */
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, NULL);
	k = fork();
	if (k == 0) {
		sleep_ms(50);
		kill(parent, SIGUSR1);
		_exit(0);
	}
	wr = epoll_wait(ep, evs, 4, 5000);
	printf("signal with SA_RESTART: %s handled %d\n", ret(wr), (int)usr1_count);
	reap(k);

	/* epoll_pwait: the wait's mask blocks the signal, which waits until after. */
	sigset_t block, old;
	sigemptyset(&block);
	sigaddset(&block, SIGUSR1);
	sigprocmask(SIG_BLOCK, &block, &old);
	kill(parent, SIGUSR1);
	wr = epoll_pwait(ep, evs, 4, 20, &block);
	printf("pwait, blocked by its mask: %s handled %d\n", ret(wr), (int)usr1_count);
	sigset_t empty;
	sigemptyset(&empty);
	wr = epoll_pwait(ep, evs, 4, -1, &empty);
	printf("pwait, let in by its mask: %s handled %d\n", ret(wr), (int)usr1_count);
	sigset_t now;
	sigprocmask(SIG_SETMASK, NULL, &now);
	printf("mask after: blocked %d\n", sigismember(&now, SIGUSR1));
	sigprocmask(SIG_SETMASK, &old, NULL);

	/* A closed set is no set. */
	close(ep);
	close(ep2);
	printf("closed: %s\n", ret(epoll_wait(ep, evs, 4, 0)));
	return 0;
}
