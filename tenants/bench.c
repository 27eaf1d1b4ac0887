/*
 * Micro-benchmarks that run the same natively and in Endo; each prints one line "ns=<value>",
 * timed inside the process with the vDSO clock, so process start does not count.
 *
 *   bench getpid N     ns per getpid system call (N calls, through libc's wrapper)
 *   bench getpid-trap N  the same through syscall(3), whose call site is never patched
 *   bench touch MIB    ns per page for mmap of MIB mebibytes and a first write to each page
 *   bench fork N       ns per fork + exit + wait
 *   bench forkexec N   ns per fork + exec (of this program, "bench exit") + wait
 *   bench pipe N       ns per round trip of one byte between two processes over two pipes
 *   bench futex N      ns per round trip between two threads over a futex
 *   bench yield N      ns per sched_yield
 *   bench cow MIB      ns per page for a child's first write to each page of MIB after fork
 *   bench memtable N   the memory table: N samples of each row, one line a row:
 *                      "row=NAME median=NS p99=NS faults=F" (F: minor faults per sample)
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

#include <sys/resource.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static atomic_int fword;

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static long minflt(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

/* report prints a row from its samples (sorted here) and the faults they took. */
static void report(const char *name, double *v, int n, long faults)
{
	qsort(v, n, sizeof v[0], cmp_double);
	printf("row=%s median=%.1f p99=%.1f faults=%.2f\n", name, v[n / 2], v[(n * 99) / 100], (double)faults / n);
}

#define PAGE 4096L
#define MIB (1L << 20)

static void memtable(int n)
{
	if (n < 1)
		n = 1;
	double *v = calloc((size_t)n, sizeof(double));
	long f0;
	/* first touch of a freshly mapped page */
	f0 = minflt();
	for (int i = 0; i < n; i++) {
		char *p = mmap(0, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		double t0 = now();
		p[0] = 1;
		v[i] = now() - t0;
		munmap(p, PAGE);
	}
	report("first-touch", v, n, minflt() - f0);
	/* map one page (and touch it: Linux maps lazily, Endo eagerly) */
	f0 = minflt();
	for (int i = 0; i < n; i++) {
		double t0 = now();
		char *p = mmap(0, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		p[0] = 1;
		v[i] = now() - t0;
		munmap(p, PAGE);
	}
	report("map-1-page", v, n, minflt() - f0);
	/* map 512 pages in one call and touch them: per page */
	f0 = minflt();
	for (int i = 0; i < n; i++) {
		double t0 = now();
		char *p = mmap(0, 512 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		for (long o = 0; o < 512 * PAGE; o += PAGE)
			p[o] = 1;
		v[i] = (now() - t0) / 512;
		munmap(p, 512 * PAGE);
	}
	report("map-512-pages-per-page", v, n, minflt() - f0);
	/* protect 2 MiB of written memory read-only, then read it all (per page) */
	double *w = calloc((size_t)n, sizeof(double));
	long fp = 0, fr = 0;
	for (int i = 0; i < n; i++) {
		char *p = mmap(0, 2 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		memset(p, 1, 2 * MIB);
		f0 = minflt();
		double t0 = now();
		mprotect(p, 2 * MIB, PROT_READ);
		v[i] = now() - t0;
		fp += minflt() - f0;
		f0 = minflt();
		volatile char sink = 0;
		t0 = now();
		for (long o = 0; o < 2 * MIB; o += PAGE)
			sink += p[o];
		w[i] = (now() - t0) / (2 * MIB / PAGE);
		fr += minflt() - f0;
		munmap(p, 2 * MIB);
	}
	report("protect-2-MiB", v, n, fp);
	report("read-after-protect-per-page", w, n, fr);
	/* fork with 64 MiB mapped: the fork call, the child's first read pass, the parent's re-read,
	 * and the unmap of the 64 MiB */
	int m = n < 10 ? n : 10;
	double *c = calloc((size_t)m, sizeof(double)), *r = calloc((size_t)m, sizeof(double)),
	       *u = calloc((size_t)m, sizeof(double));
	long fc = 0, frr = 0;
	for (int i = 0; i < m; i++) {
		char *p = mmap(0, 64 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		memset(p, 1, 64 * MIB);
		int fd[2];
		if (pipe(fd))
			exit(1);
		double t0 = now();
		pid_t pid = fork();
		if (pid == 0) {
			double t1 = now();
			long f1 = minflt();
			volatile char sink = 0;
			for (long o = 0; o < 64 * MIB; o += PAGE)
				sink += p[o];
			double res[2] = { (now() - t1) / (64 * MIB / PAGE), (double)(minflt() - f1) };
			if (write(fd[1], res, sizeof res) != sizeof res)
				_exit(1);
			_exit(0);
		}
		v[i] = now() - t0;
		double res[2];
		if (read(fd[0], res, sizeof res) != sizeof res)
			exit(1);
		waitpid(pid, 0, 0);
		c[i] = res[0];
		fc += (long)res[1];
		f0 = minflt();
		volatile char sink = 0;
		t0 = now();
		for (long o = 0; o < 64 * MIB; o += PAGE)
			sink += p[o];
		r[i] = (now() - t0) / (64 * MIB / PAGE);
		frr += minflt() - f0;
		t0 = now();
		munmap(p, 64 * MIB);
		u[i] = now() - t0;
		close(fd[0]);
		close(fd[1]);
	}
	report("fork-with-64-MiB", v, m, 0);
	report("child-first-read-per-page", c, m, fc);
	report("parent-reread-per-page", r, m, frr);
	report("unmap-64-MiB", u, m, 0);
}

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


int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "exit"))
		return 0;
	if (argc < 3)
		return 2;
	long n = atol(argv[2]);
	if (!strcmp(argv[1], "getpid")) {
		for (int i = 0; i < 1000; i++) /* warm up */
			getpid();
		double t0 = now();
		for (long i = 0; i < n; i++)
			getpid();
		printf("ns=%.1f\n", (now() - t0) / n);
		return 0;
	}
	if (!strcmp(argv[1], "getpid-trap")) {
		/* syscall(3) loads the number from a register: a site that is never patched. */
		for (int i = 0; i < 1000; i++)
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
	if (!strcmp(argv[1], "memtable")) {
		memtable((int)n);
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
