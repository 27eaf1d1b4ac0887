/*
 * Scheduling tests: the same program runs natively and in Endo. Each mode prints one line of
 * "key=value" fields (or "ok ..." lines for the API checks).
 *
 *   sched busy N MS        N threads spin for MS milliseconds; prints "work=<total loops>"
 *   sched nice MS          a nice 19 and a nice 0 busy thread for MS ms; "nice0=<n> nice19=<n>"
 *   sched fifo N MS        a busy SCHED_OTHER thread; a SCHED_FIFO thread sleeps MS ms N times
 *                          and measures each wake's lateness: "median_us=<u> max_us=<u>"
 *   sched blocked B MS     one busy thread for MS ms, with B (0 or 10) threads blocked in a pipe
 *                          read, a futex wait and nanosleep; then they are woken:
 *                          "work=<n> woke=<k>"
 *   sched api              the scheduling system calls' round trips; "ok ..." lines
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Small stacks: a thread's stack is mapped eagerly in Endo, and these threads need little. */
static pthread_attr_t small;

static int spawn(pthread_t *t, void *(*fn)(void *), void *arg)
{
	return pthread_create(t, &small, fn, arg);
}

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static atomic_int stop;

/* spin counts loops until stop; the clock is read through the vDSO, so no system call. */
static long spin(void)
{
	long n = 0;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		for (volatile int i = 0; i < 1000; i++)
			;
		n++;
	}
	return n;
}

static void *busy_thread(void *arg)
{
	*(long *)arg = spin();
	return 0;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static int busy(int n, int ms)
{
	pthread_t *t = calloc(n, sizeof *t);
	long *work = calloc(n, sizeof *work);
	for (int i = 0; i < n; i++)
		spawn(&t[i], busy_thread, &work[i]);
	sleep_ms(ms);
	atomic_store(&stop, 1);
	long total = 0;
	for (int i = 0; i < n; i++) {
		pthread_join(t[i], 0);
		total += work[i];
	}
	printf("work=%ld\n", total);
	return 0;
}

struct niced {
	int nice;
	long work;
	atomic_int ready;
};

static atomic_int go;

static void *nice_thread(void *arg)
{
	struct niced *w = arg;
	if (setpriority(PRIO_PROCESS, syscall(SYS_gettid), w->nice)) {
		perror("setpriority");
		exit(1);
	}
	atomic_store(&w->ready, 1);
	while (!atomic_load(&go))
		;
	w->work = spin();
	return 0;
}

static int nice_mode(int ms)
{
	struct niced w[2] = { { .nice = 19 }, { .nice = 0 } };
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		spawn(&t[i], nice_thread, &w[i]);
	while (!atomic_load(&w[0].ready) || !atomic_load(&w[1].ready))
		sched_yield();
	atomic_store(&go, 1);
	sleep_ms(ms);
	atomic_store(&stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], 0);
	printf("nice0=%ld nice19=%ld\n", w[1].work, w[0].work);
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int fifo_mode(int n, int ms)
{
	long work;
	pthread_t t;
	spawn(&t, busy_thread, &work);
	struct sched_param sp = { .sched_priority = 10 };
	if (sched_setscheduler(0, SCHED_FIFO, &sp)) {
		perror("sched_setscheduler");
		return 1;
	}
	double *late = calloc(n, sizeof *late);
	for (int i = 0; i < n; i++) {
		double t0 = now_ns();
		sleep_ms(ms);
		late[i] = (now_ns() - t0) / 1e3 - ms * 1000.0;
	}
	atomic_store(&stop, 1);
	pthread_join(t, 0);
	qsort(late, n, sizeof *late, cmp_double);
	printf("median_us=%.0f max_us=%.0f\n", late[n / 2], late[n - 1]);
	return 0;
}

static int pipes[4][2];
static atomic_int fword;
static atomic_int woke;
static int sleep_for_ms;

static void *pipe_reader(void *arg)
{
	char c;
	if (read(pipes[(long)arg][0], &c, 1) == 1)
		atomic_fetch_add(&woke, 1);
	return 0;
}

static void *futex_waiter(void *arg)
{
	while (atomic_load(&fword) == 0)
		syscall(SYS_futex, &fword, FUTEX_WAIT, 0, 0, 0, 0);
	atomic_fetch_add(&woke, 1);
	return 0;
}

static void *sleeper(void *arg)
{
	sleep_ms(sleep_for_ms);
	atomic_fetch_add(&woke, 1);
	return 0;
}

static int blocked_mode(int blocked, int ms)
{
	pthread_t t[10], b;
	int nt = 0;
	sleep_for_ms = ms + 200;
	if (blocked) {
		for (long i = 0; i < 4; i++) {
			if (pipe(pipes[i]))
				return 1;
			spawn(&t[nt++], pipe_reader, (void *)i);
		}
		for (int i = 0; i < 3; i++)
			spawn(&t[nt++], futex_waiter, 0);
		for (int i = 0; i < 3; i++)
			spawn(&t[nt++], sleeper, 0);
		sleep_ms(50); /* let them all block before the measured part */
	}
	long work;
	spawn(&b, busy_thread, &work);
	sleep_ms(ms);
	atomic_store(&stop, 1);
	pthread_join(b, 0);
	if (blocked) {
		for (int i = 0; i < 4; i++)
			if (write(pipes[i][1], "x", 1) != 1)
				return 1;
		atomic_store(&fword, 1);
		syscall(SYS_futex, &fword, FUTEX_WAKE, 10, 0, 0, 0);
		for (int i = 0; i < nt; i++)
			pthread_join(t[i], 0);
	}
	printf("work=%ld woke=%d\n", work, atomic_load(&woke));
	return 0;
}

#define CHECK(cond, ...)                                   \
	do {                                               \
		if (!(cond)) {                             \
			printf("FAIL %s: ", #cond);        \
			printf(__VA_ARGS__);               \
			printf(" (errno %d)\n", errno);    \
			return 1;                          \
		}                                          \
	} while (0)

static int api_mode(void)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CHECK(sched_getaffinity(0, sizeof set, &set) == 0, "getaffinity");
	int n = CPU_COUNT(&set);
	printf("ok cpus=%d nprocs=%ld\n", n, sysconf(_SC_NPROCESSORS_ONLN));

	/* Pin to the last vCPU and read it back. */
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(n - 1, &one);
	CHECK(sched_setaffinity(0, sizeof one, &one) == 0, "setaffinity to cpu %d", n - 1);
	CPU_ZERO(&set);
	CHECK(sched_getaffinity(0, sizeof set, &set) == 0, "getaffinity after set");
	CHECK(CPU_COUNT(&set) == 1 && CPU_ISSET(n - 1, &set), "affinity read back: %d cpus", CPU_COUNT(&set));
	/* A mask of only CPUs the pod does not have is refused. */
	cpu_set_t none;
	CPU_ZERO(&none);
	CPU_SET(n + 5, &none);
	CHECK(sched_setaffinity(0, sizeof none, &none) == -1 && errno == EINVAL, "setaffinity outside");
	CHECK(sched_setaffinity(0, sizeof set, &set) == 0, "restore");
	CPU_ZERO(&set);
	for (int i = 0; i < n; i++)
		CPU_SET(i, &set);
	CHECK(sched_setaffinity(0, sizeof set, &set) == 0, "all cpus");
	printf("ok affinity\n");

	errno = 0;
	CHECK(getpriority(PRIO_PROCESS, 0) == 0 && errno == 0, "getpriority default");
	CHECK(setpriority(PRIO_PROCESS, 0, 7) == 0, "setpriority 7");
	CHECK(getpriority(PRIO_PROCESS, 0) == 7, "getpriority 7");
	CHECK(syscall(SYS_getpriority, PRIO_PROCESS, 0) == 13, "raw getpriority is 20-nice");
	CHECK(nice(2) == 9, "nice(2)");
	CHECK(setpriority(PRIO_PROCESS, syscall(SYS_gettid), 0) == 0, "setpriority by tid");
	CHECK(getpriority(PRIO_PROCESS, getpid()) == 0, "getpriority by pid");
	CHECK(setpriority(PRIO_PROCESS, 99999, 1) == -1 && errno == ESRCH, "setpriority no such task");
	printf("ok priority\n");

	struct sched_param sp = { 0 };
	CHECK(sched_getscheduler(0) == SCHED_OTHER, "default policy");
	CHECK(sched_get_priority_max(SCHED_FIFO) == 99 && sched_get_priority_min(SCHED_FIFO) == 1, "fifo range");
	CHECK(sched_get_priority_max(SCHED_OTHER) == 0, "other range");
	sp.sched_priority = 30;
	CHECK(sched_setscheduler(0, SCHED_RR, &sp) == 0, "set RR");
	CHECK(sched_getscheduler(0) == SCHED_RR, "get RR");
	sp.sched_priority = 0;
	CHECK(sched_getparam(0, &sp) == 0 && sp.sched_priority == 30, "getparam %d", sp.sched_priority);
	sp.sched_priority = 40;
	CHECK(sched_setparam(0, &sp) == 0, "setparam");
	sp.sched_priority = 0;
	CHECK(sched_getparam(0, &sp) == 0 && sp.sched_priority == 40, "getparam after setparam");
	struct timespec ts;
	CHECK(sched_rr_get_interval(0, &ts) == 0 && ts.tv_sec == 0 && ts.tv_nsec > 0, "rr interval");
	sp.sched_priority = 0;
	CHECK(sched_setscheduler(0, SCHED_FIFO, &sp) == -1 && errno == EINVAL, "FIFO priority 0");
	sp.sched_priority = 5;
	CHECK(sched_setscheduler(0, SCHED_OTHER, &sp) == -1 && errno == EINVAL, "OTHER priority 5");
	sp.sched_priority = 0;
	CHECK(sched_setscheduler(0, 6 /* SCHED_DEADLINE */, &sp) == -1 && errno == EINVAL, "deadline");
	CHECK(sched_setscheduler(0, SCHED_IDLE, &sp) == 0, "set IDLE");
	CHECK(sched_getscheduler(0) == SCHED_IDLE, "get IDLE");
	CHECK(sched_setscheduler(0, SCHED_BATCH, &sp) == 0, "set BATCH");
	CHECK(sched_setscheduler(0, SCHED_OTHER, &sp) == 0, "set OTHER");
	CHECK(sched_getscheduler(0) == SCHED_OTHER, "get OTHER");
	CHECK(sched_yield() == 0, "yield");
	printf("ok scheduler\n");
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, 0, _IONBF, 0);
	pthread_attr_init(&small);
	pthread_attr_setstacksize(&small, 64 << 10);
	const char *mode = argc > 1 ? argv[1] : "";
	int a = argc > 2 ? atoi(argv[2]) : 0, b = argc > 3 ? atoi(argv[3]) : 0;
	if (!strcmp(mode, "busy"))
		return busy(a, b);
	if (!strcmp(mode, "nice"))
		return nice_mode(a);
	if (!strcmp(mode, "fifo"))
		return fifo_mode(a, b);
	if (!strcmp(mode, "blocked"))
		return blocked_mode(a, b);
	if (!strcmp(mode, "api"))
		return api_mode();
	fprintf(stderr, "usage: sched busy N MS | nice MS | fifo N MS | blocked B MS | api\n");
	return 2;
}
