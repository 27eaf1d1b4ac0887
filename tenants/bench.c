/*
 * Micro-benchmarks that run the same natively and in Endo; each prints one line "ns=<value>",
 * timed inside the process with the vDSO clock, so process start does not count.
 *
 *   bench getpid N     ns per getpid system call (N calls)
 *   bench touch MIB    ns per page for mmap of MIB mebibytes and a first write to each page
 *   bench fork N       ns per fork + exit + wait
 *   bench forkexec N   ns per fork + exec (of this program, "bench exit") + wait
 *   bench pipe N       ns per round trip of one byte between two processes over two pipes
 *   bench futex N      ns per round trip between two threads over a futex
 *   bench yield N      ns per sched_yield
 *   bench cow MIB      ns per page for a child's first write to each page of MIB after fork
 */
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

static atomic_int fword;

static void futex_wait(atomic_int *w, int val) { syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, val, 0, 0, 0); }
static void futex_wake(atomic_int *w) { syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0); }

/* The partner thread: waits for an odd value, answers with the next even one. */
static void *futex_partner(void *arg)
{
	long n = (long)arg;
	for (long i = 0; i < n; i++) {
		int want = 2 * (int)i + 1;
		while (atomic_load(&fword) != want)
			futex_wait(&fword, want - 1);
		atomic_store(&fword, want + 1);
		futex_wake(&fword);
	}
	return 0;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "exit"))
		return 0;
	if (argc < 3)
		return 2;
	long n = atol(argv[2]);
	if (!strcmp(argv[1], "getpid")) {
		for (int i = 0; i < 1000; i++) /* warm up */
			syscall(SYS_getpid);
		double t0 = now();
		for (long i = 0; i < n; i++)
			syscall(SYS_getpid);
		printf("ns=%.1f\n", (now() - t0) / n);
		return 0;
	}
	if (!strcmp(argv[1], "touch")) {
		size_t len = (size_t)n << 20;
		double t0 = now();
		char *p = mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return 1;
		for (size_t off = 0; off < len; off += 4096)
			p[off] = 1;
		printf("ns=%.1f\n", (now() - t0) / (len / 4096));
		return 0;
	}
	if (!strcmp(argv[1], "fork") || !strcmp(argv[1], "forkexec")) {
		int exec = !strcmp(argv[1], "forkexec");
		double t0 = now();
		for (long i = 0; i < n; i++) {
			pid_t pid = fork();
			if (pid == 0) {
				if (exec)
					execl("/proc/self/exe", "bench", "exit", (char *)0), execl(argv[0], "bench", "exit", (char *)0);
				_exit(0);
			}
			int st;
			waitpid(pid, &st, 0);
		}
		printf("ns=%.1f\n", (now() - t0) / n);
		return 0;
	}
	if (!strcmp(argv[1], "pipe")) {
		int a[2], b[2];
		char c = 0;
		if (pipe(a) || pipe(b))
			return 1;
		pid_t pid = fork();
		if (pid == 0) {
			for (long i = 0; i < n; i++) {
				if (read(a[0], &c, 1) != 1 || write(b[1], &c, 1) != 1)
					_exit(1);
			}
			_exit(0);
		}
		double t0 = now();
		for (long i = 0; i < n; i++) {
			if (write(a[1], &c, 1) != 1 || read(b[0], &c, 1) != 1)
				return 1;
		}
		printf("ns=%.1f\n", (now() - t0) / n);
		waitpid(pid, 0, 0);
		return 0;
	}
	if (!strcmp(argv[1], "futex")) {
		pthread_t t;
		pthread_create(&t, 0, futex_partner, (void *)n);
		double t0 = now();
		for (long i = 0; i < n; i++) {
			int want = 2 * (int)i + 2;
			atomic_store(&fword, want - 1);
			futex_wake(&fword);
			while (atomic_load(&fword) != want)
				futex_wait(&fword, want - 1);
		}
		printf("ns=%.1f\n", (now() - t0) / n);
		pthread_join(t, 0);
		return 0;
	}
	if (!strcmp(argv[1], "yield")) {
		double t0 = now();
		for (long i = 0; i < n; i++)
			sched_yield();
		printf("ns=%.1f\n", (now() - t0) / n);
		return 0;
	}
	if (!strcmp(argv[1], "cow")) {
		size_t len = (size_t)n << 20;
		char *p = mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return 1;
		memset(p, 1, len);
		int fd[2];
		if (pipe(fd))
			return 1;
		pid_t pid = fork();
		if (pid == 0) {
			double t0 = now();
			for (size_t off = 0; off < len; off += 4096)
				p[off] = 2;
			double per = (now() - t0) / (len / 4096);
			if (write(fd[1], &per, sizeof per) != sizeof per)
				_exit(1);
			_exit(0);
		}
		double per = 0;
		if (read(fd[0], &per, sizeof per) != sizeof per)
			return 1;
		waitpid(pid, 0, 0);
		printf("ns=%.1f\n", per);
		return 0;
	}
	return 2;
}
