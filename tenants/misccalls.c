/*
 * Smaller calls programs expect: rt_sigtimedwait (as container inits use it), times,
 * clock_getres, fallocate, preadv/pwritev, flock, personality, getresuid, getcpu. Prints one
 * line per check, the same natively (as root) and in Endo.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/personality.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/times.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK(what, cond) printf("%s: %s\n", what, (cond) ? "ok" : "FAILED")

static volatile int usr2;
static void on_usr2(int sig) { (void)sig; usr2++; }

int main(void)
{
	/* sigtimedwait: a blocked signal already pending is taken, with its sender. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, 0);
	kill(getpid(), SIGUSR1);
	siginfo_t si;
	memset(&si, 0, sizeof si);
	int sig = sigtimedwait(&set, &si, 0);
	CHECK("sigtimedwait pending", sig == SIGUSR1 && si.si_signo == SIGUSR1 && si.si_pid == getpid());
	sigset_t pend;
	sigpending(&pend);
	CHECK("taken off pending", !sigismember(&pend, SIGUSR1));
	struct timespec short_wait = { 0, 50 * 1000 * 1000 };
	errno = 0;
	CHECK("sigtimedwait timeout", sigtimedwait(&set, 0, &short_wait) == -1 && errno == EAGAIN);
	struct timespec zero = { 0, 0 };
	errno = 0;
	CHECK("sigtimedwait poll", sigtimedwait(&set, 0, &zero) == -1 && errno == EAGAIN);

	/* ... and one sent later by another process wakes the waiter (a fatal one, blocked, too). */
	pid_t parent = getpid(), pid = fork();
	if (pid == 0) {
		usleep(100 * 1000);
		kill(parent, SIGTERM);
		_exit(0);
	}
	struct timespec long_wait = { 10, 0 };
	memset(&si, 0, sizeof si);
	sig = sigtimedwait(&set, &si, &long_wait);
	CHECK("sigtimedwait woken", sig == SIGTERM && si.si_pid == pid);
	waitpid(pid, 0, 0);

	/* A signal outside the set, not blocked, cuts the wait short: its handler runs. */
	signal(SIGUSR2, on_usr2);
	pid = fork();
	if (pid == 0) {
		usleep(100 * 1000);
		kill(parent, SIGUSR2);
		_exit(0);
	}
	errno = 0;
	sig = sigtimedwait(&set, 0, &long_wait);
	CHECK("sigtimedwait interrupted", sig == -1 && errno == EINTR && usr2 == 1);
	waitpid(pid, 0, 0);
	sigprocmask(SIG_UNBLOCK, &set, 0);

	struct tms tms;
	clock_t c = times(&tms);
	CHECK("times", c != (clock_t)-1 && tms.tms_utime >= 0 && tms.tms_cstime >= 0);
	struct timespec res;
	CHECK("clock_getres", clock_getres(CLOCK_MONOTONIC, &res) == 0 && res.tv_sec == 0 && res.tv_nsec == 1 &&
				      clock_getres(CLOCK_PROCESS_CPUTIME_ID, &res) == 0 && res.tv_nsec == 1);
	CHECK("clock_getres bad clock", clock_getres(12345, &res) == -1 && errno == EINVAL);

	char path[64];
	snprintf(path, sizeof path, "/misccalls-%d", getpid());
	int fd = open(path, O_CREAT | O_RDWR, 0644);
	struct stat st;
	CHECK("fallocate", fallocate(fd, 0, 0, 8192) == 0 && fstat(fd, &st) == 0 && st.st_size == 8192);
	struct iovec w[2] = { { "abc", 3 }, { "def", 3 } };
	CHECK("pwritev", pwritev(fd, w, 2, 100) == 6);
	char a[2], b[4] = { 0 };
	struct iovec r[2] = { { a, 2 }, { b, 3 } };
	CHECK("preadv", preadv(fd, r, 2, 101) == 5 && memcmp(a, "bc", 2) == 0 && memcmp(b, "def", 3) == 0);
	CHECK("offset untouched", lseek(fd, 0, SEEK_CUR) == 0);
	CHECK("preadv2 at the position", preadv2(fd, r, 1, -1, 0) == 2 && lseek(fd, 0, SEEK_CUR) == 2);

	/* flock: another open file description of the same file waits for the lock. */
	CHECK("flock", flock(fd, LOCK_EX) == 0);
	pid = fork();
	if (pid == 0) {
		int fd2 = open(path, O_RDWR);
		int busy = flock(fd2, LOCK_EX | LOCK_NB) == -1 && errno == EWOULDBLOCK;
		int got = flock(fd2, LOCK_EX) == 0; /* waits until the parent lets go */
		_exit(busy && got ? 0 : 1);
	}
	usleep(200 * 1000);
	flock(fd, LOCK_UN);
	int status;
	waitpid(pid, &status, 0);
	CHECK("flock waits, then gets it", WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(fd);
	unlink(path);

	CHECK("personality", personality(0xffffffff) == PER_LINUX);
	uid_t ru, eu, su;
	CHECK("getresuid", getresuid(&ru, &eu, &su) == 0 && ru == 0 && eu == 0 && su == 0);
	unsigned cpu = 999, node = 999;
	CHECK("getcpu", syscall(SYS_getcpu, &cpu, &node, 0) == 0 && cpu < (unsigned)sysconf(_SC_NPROCESSORS_ONLN) &&
				node == 0);
	return 0;
}
