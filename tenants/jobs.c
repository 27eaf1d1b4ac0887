/*
 * Job control, waitid, poll and select, each printing what it saw so that a run inside Endo can
 * be compared with a native run: `jobs stop|tstp|waitid|poll|select|ppoll|threads`.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t usr1_count;
static volatile int chld_codes[8];
static volatile int chld_status[8];
static volatile sig_atomic_t chld_n;

static void on_usr1(int sig) { (void)sig; usr1_count++; }

static void on_chld(int sig, siginfo_t *si, void *uc)
{
	(void)sig; (void)uc;
	if (chld_n < 8) {
		chld_codes[chld_n] = si->si_code;
		chld_status[chld_n] = si->si_status;
		chld_n++;
	}
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static void handle(int sig, void (*fn)(int), int flags)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = fn;
	sa.sa_flags = flags;
	sigaction(sig, &sa, NULL);
}

/* The state letter of /proc/<pid>/stat. */
static char proc_state(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return '?';
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return '?';
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p[2] : '?';
}

static void describe(const char *what, int st)
{
	if (WIFEXITED(st))
		printf("%s: exited %d\n", what, WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		printf("%s: killed by %d\n", what, WTERMSIG(st));
	else if (WIFSTOPPED(st))
		printf("%s: stopped by %d (status %#x)\n", what, WSTOPSIG(st), st);
	else if (WIFCONTINUED(st))
		printf("%s: continued (status %#x)\n", what, st);
	else
		printf("%s: status %#x\n", what, st);
}

/* A child that loops in tenant code is stopped, seen stopped, continued, killed. */
static int stop(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_chld;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigaction(SIGCHLD, &sa, NULL);

	int ready[2];
	pipe(ready);
	pid_t c = fork();
	if (c == 0) {
		setpgid(0, 0);
		write(ready[1], "r", 1);
		for (volatile unsigned long i = 0;; i++)
			;
	}
	char b;
	read(ready[0], &b, 1);
	int st;
	kill(c, SIGSTOP);
	pid_t w = waitpid(c, &st, WUNTRACED);
	describe(w == c ? "after SIGSTOP" : "wrong pid", st);
	printf("state %c\n", proc_state(c));
	printf("nohang while stopped: %d\n", waitpid(c, &st, WNOHANG | WUNTRACED));
	kill(c, SIGCONT);
	w = waitpid(c, &st, WCONTINUED);
	describe(w == c ? "after SIGCONT" : "wrong pid", st);
	printf("state after continue is T: %d\n", proc_state(c) == 'T');
	kill(c, SIGKILL);
	w = waitpid(c, &st, 0);
	describe(w == c ? "after SIGKILL" : "wrong pid", st);
	/* The stop's SIGCHLD came before its wait returned. The continue's comes when the child
	 * runs again on Linux and may merge with the exit's, so only a count is certain. */
	printf("first SIGCHLD: code %d status %d; more: %d\n", chld_codes[0], chld_status[0], chld_n >= 2);
	return 0;
}

/* SIGTSTP runs a handler if there is one, else stops. */
static volatile sig_atomic_t tstp_seen;
static void on_tstp(int sig) { (void)sig; tstp_seen = 1; }

static int tstp(void)
{
	int ready[2];
	pipe(ready);
	pid_t c = fork();
	if (c == 0) {
		setpgid(0, 0);
		handle(SIGTSTP, on_tstp, 0);
		write(ready[1], "r", 1);
		while (!tstp_seen)
			pause();
		_exit(3);
	}
	char b;
	int st;
	read(ready[0], &b, 1);
	kill(c, SIGTSTP);
	waitpid(c, &st, WUNTRACED);
	describe("with a handler", st);

	c = fork();
	if (c == 0) {
		setpgid(0, 0);
		write(ready[1], "r", 1);
		for (;;)
			pause();
	}
	read(ready[0], &b, 1);
	kill(c, SIGTSTP);
	waitpid(c, &st, WUNTRACED);
	describe("without one", st);
	/* SIGTERM waits until the stopped process continues. */
	kill(c, SIGTERM);
	sleep_ms(50);
	printf("SIGTERM while stopped, nohang: %d\n", waitpid(c, &st, WNOHANG));
	kill(c, SIGCONT);
	waitpid(c, &st, 0);
	describe("then SIGCONT", st);

	/* A stop signal the process raises itself. */
	c = fork();
	if (c == 0) {
		setpgid(0, 0);
		raise(SIGTSTP);
		_exit(4);
	}
	waitpid(c, &st, WUNTRACED);
	describe("raised", st);
	kill(c, SIGCONT);
	waitpid(c, &st, 0);
	describe("continued", st);
	return 0;
}

static void show_info(const char *what, int ret, siginfo_t *si, pid_t child);

/* try_waitid waits with a zeroed siginfo and shows what waitid said. */
static void try_waitid(const char *what, pid_t child, idtype_t idtype, id_t id, int options)
{
	siginfo_t si;
	memset(&si, 0, sizeof si);
	show_info(what, waitid(idtype, id, &si, options), &si, child);
}

static void show_info(const char *what, int ret, siginfo_t *si, pid_t child)
{
	printf("%s: ret %d", what, ret);
	if (ret < 0)
		printf(" errno %s", strerror(errno));
	printf(" signo %d code %d pid %s status %d\n", si->si_signo, si->si_code,
	       si->si_pid == child ? "child" : si->si_pid == 0 ? "0" : "other", si->si_status);
}

static int waitid_test(void)
{
	siginfo_t si;
	int ready[2];
	pipe(ready);
	pid_t c = fork();
	if (c == 0) {
		setpgid(0, 0);
		write(ready[1], "r", 1);
		for (;;)
			pause();
	}
	char b;
	read(ready[0], &b, 1);
	memset(&si, 0x5a, sizeof si);
	int r = waitid(P_PID, c, &si, WEXITED | WNOHANG);
	show_info("nohang, nothing", r, &si, c);

	kill(c, SIGSTOP);
	try_waitid("stopped, nowait", c, P_PID, c, WSTOPPED | WNOWAIT);
	try_waitid("stopped, pgid", c, P_PGID, c, WSTOPPED);
	try_waitid("stopped, collected", c, P_ALL, 0, WSTOPPED | WNOHANG);

	kill(c, SIGCONT);
	try_waitid("continued", c, P_ALL, 0, WCONTINUED);

	kill(c, SIGTERM);
	try_waitid("killed, nowait", c, P_PID, c, WEXITED | WNOWAIT);
	try_waitid("killed", c, P_PID, c, WEXITED);

	c = fork();
	if (c == 0)
		_exit(7);
	try_waitid("exited", c, P_ALL, 0, WEXITED);

	memset(&si, 0x5a, sizeof si);
	r = waitid(P_ALL, 0, &si, WEXITED | WNOHANG);
	show_info("no children", r, &si, c);
	r = waitid(P_ALL, 0, &si, 0);
	show_info("no options", r, &si, c);
	r = waitid(P_PID, 0, &si, WEXITED);
	show_info("pid 0", r, &si, c);
	return 0;
}

/* A child that sends SIGUSR1 to its parent every 20 ms until killed. */
static pid_t nag(void)
{
	pid_t parent = getpid();
	pid_t c = fork();
	if (c == 0) {
		for (;;) {
			sleep_ms(20);
			kill(parent, SIGUSR1);
		}
	}
	return c;
}

static void reap(pid_t c)
{
	kill(c, SIGKILL);
	waitpid(c, NULL, 0);
}

static int poll_test(void)
{
	int p[2];
	pipe(p);
	struct pollfd pf = { .fd = p[0], .events = POLLIN };
	int n = poll(&pf, 1, 50);
	printf("timeout: %d revents %#x\n", n, pf.revents);

	pid_t c = fork();
	if (c == 0) {
		sleep_ms(50);
		write(p[1], "x", 1);
		_exit(0);
	}
	n = poll(&pf, 1, 10000);
	printf("after a write: %d revents %#x\n", n, pf.revents);
	char b;
	read(p[0], &b, 1);
	waitpid(c, NULL, 0);

	handle(SIGUSR1, on_usr1, SA_RESTART); /* poll is never restarted after a handler */
	c = nag();
	n = poll(&pf, 1, 10000);
	printf("signal: %d %s handled %d\n", n, n < 0 ? strerror(errno) : "", usr1_count > 0);
	reap(c);

	struct pollfd two[2] = { { .fd = p[1], .events = POLLOUT }, { .fd = -1, .events = POLLIN } };
	n = poll(two, 2, 0);
	printf("writable: %d revents %#x %#x\n", n, two[0].revents, two[1].revents);

	close(p[1]);
	n = poll(&pf, 1, 1000);
	printf("writer closed: %d revents %#x\n", n, pf.revents);

	struct pollfd bad = { .fd = 99, .events = POLLIN };
	n = poll(&bad, 1, 1000);
	printf("bad fd: %d revents %#x\n", n, bad.revents);

	int dn = open("/dev/null", O_RDWR);
	int df = open("/data.txt", O_RDONLY);
	struct pollfd files[2] = { { .fd = dn, .events = POLLIN | POLLOUT | POLLPRI },
				   { .fd = df, .events = POLLIN | POLLOUT } };
	n = poll(files, 2, 1000);
	printf("files: %d revents %#x %#x\n", n, files[0].revents, files[1].revents);

	n = poll(NULL, 0, 30);
	printf("no fds: %d\n", n);
	return 0;
}

static int select_test(void)
{
	int p[2];
	pipe(p);
	fd_set r, w;
	FD_ZERO(&r);
	FD_SET(p[0], &r);
	struct timeval tv = { 0, 50000 };
	int n = select(p[0] + 1, &r, NULL, NULL, &tv);
	printf("timeout: %d left %ld.%06ld readable %d\n", n, (long)tv.tv_sec, (long)tv.tv_usec,
	       FD_ISSET(p[0], &r));

	write(p[1], "x", 1);
	FD_ZERO(&r);
	FD_ZERO(&w);
	FD_SET(p[0], &r);
	FD_SET(p[1], &r);
	FD_SET(p[1], &w);
	n = select(p[1] + 1, &r, &w, NULL, NULL);
	printf("ready: %d read %d %d write %d\n", n, FD_ISSET(p[0], &r), FD_ISSET(p[1], &r),
	       FD_ISSET(p[1], &w));
	char b;
	read(p[0], &b, 1);

	FD_ZERO(&r);
	FD_SET(p[0], &r);
	FD_SET(40, &r);
	n = select(41, &r, NULL, NULL, NULL);
	printf("bad fd: %d %s\n", n, n < 0 ? strerror(errno) : "");

	handle(SIGUSR1, on_usr1, SA_RESTART);
	pid_t c = nag();
	FD_ZERO(&r);
	FD_SET(p[0], &r);
	tv.tv_sec = 10;
	tv.tv_usec = 0;
	n = select(p[0] + 1, &r, NULL, NULL, &tv);
	printf("signal: %d %s time left %d\n", n, n < 0 ? strerror(errno) : "", tv.tv_sec > 0 && tv.tv_sec < 10);
	reap(c);

	FD_ZERO(&r);
	FD_SET(p[0], &r);
	struct timespec ts = { 0, 20000000 };
	n = pselect(p[0] + 1, &r, NULL, NULL, &ts, NULL);
	printf("pselect timeout: %d\n", n);
	return 0;
}

static int blocked(int sig)
{
	sigset_t cur;
	sigprocmask(SIG_BLOCK, NULL, &cur);
	return sigismember(&cur, sig);
}

static int ppoll_test(void)
{
	int p[2];
	pipe(p);
	handle(SIGUSR1, on_usr1, 0);
	struct pollfd pf = { .fd = p[0], .events = POLLIN };

	/* The wait's mask blocks the signal: ppoll waits on for the pipe, and the handler runs once
	 * the old mask is back. */
	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGUSR1);
	pid_t parent = getpid();
	pid_t c = fork();
	if (c == 0) {
		sleep_ms(30);
		kill(parent, SIGUSR1);
		sleep_ms(100);
		write(p[1], "x", 1);
		_exit(0);
	}
	usr1_count = 0;
	int n = ppoll(&pf, 1, NULL, &mask);
	printf("blocked by the wait's mask: %d revents %#x handled %d\n", n, pf.revents, usr1_count);
	char b;
	read(p[0], &b, 1);
	waitpid(c, NULL, 0);

	/* The signal is blocked, and the wait's mask lets it in: EINTR, and the old mask after. */
	sigprocmask(SIG_BLOCK, &mask, NULL);
	usr1_count = 0;
	c = nag();
	sigset_t none;
	sigemptyset(&none);
	struct timespec ts = { 10, 0 };
	n = ppoll(&pf, 1, &ts, &none);
	printf("let in by the wait's mask: %d %s handled %d blocked after %d\n", n,
	       n < 0 ? strerror(errno) : "", usr1_count > 0, blocked(SIGUSR1));
	reap(c);

	n = syscall(SYS_ppoll, &pf, 1, NULL, &none, 4);
	printf("bad sigsetsize: %d %s\n", n, n < 0 ? strerror(errno) : "");
	ts.tv_sec = 0;
	ts.tv_nsec = 1000000000;
	n = ppoll(&pf, 1, &ts, NULL);
	printf("bad timeout: %d %s\n", n, n < 0 ? strerror(errno) : "");
	return 0;
}

/* A stopped process with several threads: none of them runs until it continues. */
static int tick_fd;
static void *ticker(void *arg)
{
	(void)arg;
	for (;;) {
		write(tick_fd, "t", 1);
		sleep_ms(1);
	}
	return NULL;
}

static int threads_test(void)
{
	int p[2];
	pipe(p);
	pid_t c = fork();
	if (c == 0) {
		setpgid(0, 0);
		tick_fd = p[1];
		pthread_t th[3];
		for (int i = 0; i < 3; i++)
			pthread_create(&th[i], NULL, ticker, NULL);
		for (volatile unsigned long i = 0;; i++)
			;
	}
	close(p[1]);
	char buf[4096];
	read(p[0], buf, 1); /* ticking */
	kill(c, SIGSTOP);
	int st;
	waitpid(c, &st, WUNTRACED);
	describe("stopped", st);
	fcntl(p[0], F_SETFL, O_NONBLOCK);
	while (read(p[0], buf, sizeof buf) > 0)
		;
	sleep_ms(100);
	ssize_t n = read(p[0], buf, sizeof buf);
	printf("ticks while stopped: %zd\n", n < 0 ? 0 : n);
	kill(c, SIGCONT);
	fcntl(p[0], F_SETFL, 0);
	n = read(p[0], buf, 1);
	printf("ticks after continue: %zd\n", n);
	kill(c, SIGKILL);
	waitpid(c, &st, 0);
	describe("killed", st);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc < 2)
		return 2;
	const char *m = argv[1];
	if (!strcmp(m, "stop"))
		return stop();
	if (!strcmp(m, "tstp"))
		return tstp();
	if (!strcmp(m, "waitid"))
		return waitid_test();
	if (!strcmp(m, "poll"))
		return poll_test();
	if (!strcmp(m, "select"))
		return select_test();
	if (!strcmp(m, "ppoll"))
		return ppoll_test();
	if (!strcmp(m, "threads"))
		return threads_test();
	fprintf(stderr, "jobs: unknown test %s\n", m);
	return 2;
}
