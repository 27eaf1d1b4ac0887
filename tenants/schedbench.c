/*
 * Scheduler benchmarks for `endo sched-perf` and `endo sched-fair`: the same static program runs
 * natively and in Endo. Times come from the vDSO clock, so reading it costs no system call.
 * Latency modes print one line "row=NAME median=NS p99=NS n=SAMPLES [alt=F]".
 *
 *   schedbench yieldthreads N  two threads pinned to CPU 0 alternate with sched_yield; a sample
 *                              is one sched_yield call that let the other thread run (a round
 *                              trip); alt is the fraction of calls during which the other ran
 *   schedbench wakesame N      a SCHED_FIFO thread blocked in a futex wait is woken by a
 *                              SCHED_OTHER thread on the same CPU: wake call to wakee running
 *   schedbench wakecross N     the same with waker on CPU 0 and wakee on CPU 1
 *   schedbench yieldprocs N    two processes (fork) busy-yield N times each; no pinning here
 *                              (the caller pins with taskset). A sample is one sched_yield call;
 *                              alt is the fraction of consecutive yields, by time, that came
 *                              from different processes (1.0: strict alternation). No memory is
 *                              shared: the child sends its samples through a pipe at the end.
 *   schedbench yieldsignal N   a child busy-yields until it has taken N SIGUSR1s, which its
 *                              parent sends between yields of its own; prints "yieldsignal ok
 *                              signals=N" once the child has them all (exit 1 after 30 s)
 *   schedbench pipewake N      a process on CPU 0 writes its clock into a pipe that a process on
 *                              CPU 1 sleeps reading: write call to reader running
 *   schedbench yieldsleep T N  T threads only yield while the main thread sleeps 2 ms N times; a
 *                              sample is how late a sleep ended; also prints "yieldsleep ok
 *                              yields=Y" (Y: the yields made meanwhile)
 *   schedbench spin SECONDS    one busy loop for SECONDS (0: until killed)
 *   schedbench fair T SECONDS [lock|procs]
 *                              T busy threads for SECONDS; with lock, also a thread that holds a
 *                              pthread mutex for 10 ms at a time and 4 threads that take the
 *                              same mutex between 1 ms bursts of work; with procs, the T threads
 *                              are split between two processes. Prints "fair ok T", with lock
 *                              followed by "held H C": how often the holder and the contenders
 *                              took the mutex (natively, 6 s: about 43 and 540).
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void report(const char *name, double *v, int n, double alt)
{
	if (n == 0) {
		printf("row=%s median=0 p99=0 n=0\n", name);
		return;
	}
	qsort(v, n, sizeof v[0], cmp_double);
	printf("row=%s median=%.1f p99=%.1f n=%d", name, v[n / 2], v[(n * 99) / 100], n);
	if (alt >= 0)
		printf(" alt=%.3f", alt);
	printf("\n");
	fflush(stdout);
}

static double *alloc_samples(int n)
{
	double *v = calloc(n > 0 ? n : 1, sizeof(double));
	if (!v) {
		perror("calloc");
		exit(1);
	}
	return v;
}

/* read_samples reads n samples another process sends through fd, or exits naming whose. */
static void read_samples(int fd, double *v, int n, const char *whose)
{
	char *p = (char *)v;
	size_t left = n * sizeof(double);
	while (left > 0) {
		ssize_t r = read(fd, p, left);
		if (r <= 0) {
			fprintf(stderr, "schedbench: the %s samples did not arrive\n", whose);
			exit(1);
		}
		p += r, left -= r;
	}
}

static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof set, &set) != 0) {
		perror("sched_setaffinity");
		exit(1);
	}
}

static long futex(atomic_int *w, int op, int val)
{
	return syscall(SYS_futex, w, op, val, 0, 0, 0);
}

/* spin_ns busy-waits for ns without a system call. */
static void spin_ns(double ns)
{
	double end = now() + ns;
	while (now() < end)
		;
}

/* --- yieldthreads --- */

static int yt_n;
static atomic_int yt_go;
static atomic_long yt_count[2];
static double *yt_samples[2];
static long yt_alternated[2];

static void *yield_thread(void *arg)
{
	int me = (int)(long)arg;
	pin(0);
	atomic_fetch_add(&yt_go, 1);
	while (atomic_load(&yt_go) < 2)
		sched_yield();
	/* Keep yielding until both have their samples, so neither yields alone at the end. */
	for (long i = 0; i < yt_n || atomic_load(&yt_count[!me]) < yt_n; i++) {
		long other = atomic_load(&yt_count[!me]);
		double t0 = now();
		sched_yield();
		double t1 = now();
		if (i < yt_n) {
			yt_samples[me][i] = t1 - t0;
			if (atomic_load(&yt_count[!me]) != other)
				yt_alternated[me]++;
			atomic_store(&yt_count[me], i + 1);
		}
	}
	return 0;
}

static atomic_int ys_stop;
static atomic_long ys_yields;

static void *yield_only(void *arg)
{
	long y = 0;
	while (!atomic_load(&ys_stop)) {
		sched_yield();
		y++;
	}
	atomic_fetch_add(&ys_yields, y);
	return 0;
}

/* The main thread's sleeps must end while every other thread only yields: each end takes a
 * vCPU from threads that never block. */
static void yieldsleep(int threads, int n)
{
	pthread_t *t = calloc(threads, sizeof t[0]);
	for (long i = 0; i < threads; i++)
		pthread_create(&t[i], 0, yield_only, 0);
	double *late = alloc_samples(n);
	for (int i = 0; i < n; i++) {
		double t0 = now();
		usleep(2000);
		late[i] = now() - t0 - 2e6;
	}
	atomic_store(&ys_stop, 1);
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], 0);
	report("yieldsleep", late, n, -1);
	printf("yieldsleep ok yields=%ld\n", atomic_load(&ys_yields));
}

static void yieldthreads(int n)
{
	yt_n = n;
	yt_samples[0] = alloc_samples(n);
	yt_samples[1] = alloc_samples(n);
	pthread_t t[2];
	for (long i = 0; i < 2; i++)
		pthread_create(&t[i], 0, yield_thread, (void *)i);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], 0);
	double *all = alloc_samples(2 * n);
	memcpy(all, yt_samples[0], n * sizeof(double));
	memcpy(all + n, yt_samples[1], n * sizeof(double));
	report("yieldthreads", all, 2 * n, (double)(yt_alternated[0] + yt_alternated[1]) / (2 * n));
}

/* --- wakesame, wakecross --- */

static atomic_int wk_word;
static _Atomic double wk_t0;
static atomic_int wk_tid;
static double *wk_samples;
static int wk_n, wk_cpu;

static void *wakee(void *arg)
{
	pin(wk_cpu);
	atomic_store(&wk_tid, (int)syscall(SYS_gettid));
	for (int i = 0; i < wk_n; i++) {
		while (atomic_load(&wk_word) == 0)
			futex(&wk_word, FUTEX_WAIT_PRIVATE, 0);
		wk_samples[i] = now() - atomic_load(&wk_t0);
		atomic_store(&wk_word, 0);
	}
	return 0;
}

/* sleeping reads a thread's state from /proc: 'S' once it sleeps in the kernel. */
static int sleeping(int pid, int tid)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/task/%d/stat", pid, tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t len = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[len] = 0;
	char *p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] == 'S';
}

static void wake(int n, int cross)
{
	wk_n = n;
	wk_cpu = cross ? 1 : 0;
	wk_samples = alloc_samples(n);
	pin(0);
	pthread_t t;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
	pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
	struct sched_param sp = {.sched_priority = 10};
	pthread_attr_setschedparam(&attr, &sp);
	if (pthread_create(&t, &attr, wakee, 0) != 0) {
		fprintf(stderr, "schedbench: a SCHED_FIFO thread needs CAP_SYS_NICE\n");
		exit(1);
	}
	while (atomic_load(&wk_tid) == 0)
		sched_yield();
	int pid = getpid(), tid = atomic_load(&wk_tid);
	for (int i = 0; i < n; i++) {
		/* The wakee must be asleep in its futex wait before the next wake, and (across CPUs)
		 * its CPU given time to go idle. On the same CPU the FIFO wakee runs until it sleeps. */
		while (atomic_load(&wk_word) != 0 || !sleeping(pid, tid))
			;
		if (cross)
			spin_ns(20000);
		atomic_store(&wk_t0, now());
		atomic_store(&wk_word, 1);
		futex(&wk_word, FUTEX_WAKE_PRIVATE, 1);
	}
	pthread_join(t, 0);
	report(cross ? "wakecross" : "wakesame", wk_samples, n, -1);
}

/* --- yieldprocs --- */

static pid_t fork_or_die(void)
{
	pid_t child = fork();
	if (child < 0) {
		perror("fork");
		exit(1);
	}
	return child;
}

static volatile sig_atomic_t signals_taken;

static void take_signal(int sig)
{
	(void)sig;
	signals_taken++;
}

static void yieldsignal(int n)
{
	struct sigaction sa = {.sa_handler = take_signal, .sa_flags = SA_RESTART};
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGUSR1, &sa, NULL) != 0) {
		perror("sigaction");
		exit(1);
	}
	pid_t child = fork_or_die();
	if (child == 0) {
		while (signals_taken < n)
			sched_yield();
		_exit(0);
	}
	double deadline = now() + 30e9;
	int st;
	while (waitpid(child, &st, WNOHANG) == 0) {
		if (now() > deadline) {
			kill(child, SIGKILL);
			waitpid(child, &st, 0);
			fprintf(stderr, "yieldsignal: the child had not taken %d signals after 30 s\n", n);
			exit(1);
		}
		kill(child, SIGUSR1);
		sched_yield();
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "yieldsignal: the child ended with status %#x\n", st);
		exit(1);
	}
	printf("yieldsignal ok signals=%d\n", n);
}

static void yieldprocs(int n)
{
	int ready[2], back[2];
	if (pipe(ready) || pipe(back)) {
		perror("pipe");
		exit(1);
	}
	double *start = alloc_samples(n), *end = alloc_samples(n);
	pid_t child = fork_or_die();
	if (child == 0) {
		char c = 1;
		if (write(ready[1], &c, 1) != 1)
			_exit(1);
		for (int i = 0; i < n; i++) {
			start[i] = now();
			sched_yield();
			end[i] = now();
		}
		/* Both arrays go back to the parent, in chunks a pipe takes. */
		for (int a = 0; a < 2; a++) {
			char *p = (char *)(a ? end : start);
			size_t left = n * sizeof(double);
			while (left > 0) {
				ssize_t w = write(back[1], p, left);
				if (w <= 0)
					_exit(1);
				p += w, left -= w;
			}
		}
		_exit(0);
	}
	char c;
	if (read(ready[0], &c, 1) != 1) {
		perror("read");
		exit(1);
	}
	for (int i = 0; i < n; i++) {
		start[i] = now();
		sched_yield();
		end[i] = now();
	}
	double *cstart = alloc_samples(n), *cend = alloc_samples(n);
	read_samples(back[0], cstart, n, "child's");
	read_samples(back[0], cend, n, "child's");
	waitpid(child, 0, 0);
	/* Merge the two processes' yield returns by time and count the hand-overs. */
	long switches = 0;
	int i = 0, j = 0, last = -1;
	while (i < n || j < n) {
		int who = (j >= n || (i < n && end[i] < cend[j])) ? 0 : 1;
		if (who == 0)
			i++;
		else
			j++;
		if (last >= 0 && who != last)
			switches++;
		last = who;
	}
	double *all = alloc_samples(2 * n);
	for (int k = 0; k < n; k++) {
		all[k] = end[k] - start[k];
		all[n + k] = cend[k] - cstart[k];
	}
	report("yieldprocs", all, 2 * n, (double)switches / (2 * n - 1));
}

/* --- pipewake --- */

static void pipewake(int n)
{
	int to[2], back[2];
	if (pipe(to) || pipe(back)) {
		perror("pipe");
		exit(1);
	}
	pid_t child = fork_or_die();
	if (child == 0) {
		pin(1);
		double *v = alloc_samples(n);
		for (int i = 0; i < n; i++) {
			double t0;
			if (read(to[0], &t0, sizeof t0) != sizeof t0)
				_exit(1);
			v[i] = now() - t0;
		}
		char *p = (char *)v;
		size_t left = n * sizeof(double);
		while (left > 0) {
			ssize_t w = write(back[1], p, left);
			if (w <= 0)
				_exit(1);
			p += w, left -= w;
		}
		_exit(0);
	}
	pin(0);
	for (int i = 0; i < n; i++) {
		/* The reader must be asleep in its read, and its CPU given time to go idle. */
		while (!sleeping(child, child))
			;
		spin_ns(20000);
		double t0 = now();
		if (write(to[1], &t0, sizeof t0) != sizeof t0) {
			perror("write");
			exit(1);
		}
	}
	double *v = alloc_samples(n);
	read_samples(back[0], v, n, "reader's");
	waitpid(child, 0, 0);
	report("pipewake", v, n, -1);
}

/* --- spin, fair --- */

static double fair_end;
static pthread_mutex_t fair_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned long fair_held[2]; /* times the holder, and the contenders, took the lock (under it) */

/* busy works without a system call until the deadline; the clock is the vDSO's. */
static void *busy(void *arg)
{
	volatile unsigned long x = 0;
	while (now() < fair_end)
		for (int i = 0; i < 100000; i++)
			x += i;
	return 0;
}

static void *holder(void *arg)
{
	while (now() < fair_end) {
		pthread_mutex_lock(&fair_mu);
		fair_held[0]++;
		spin_ns(10e6);
		pthread_mutex_unlock(&fair_mu);
		/* Let a contender in before taking the lock again. */
		sched_yield();
	}
	return 0;
}

static void *contender(void *arg)
{
	while (now() < fair_end) {
		pthread_mutex_lock(&fair_mu);
		fair_held[1]++;
		spin_ns(50e3);
		pthread_mutex_unlock(&fair_mu);
		spin_ns(1e6);
	}
	return 0;
}

static void fair(int tasks, double seconds, int lock, int procs)
{
	fair_end = now() + seconds * 1e9;
	/* With procs, a child runs half of the threads; it says when they are up through a pipe. */
	int up[2] = {-1, -1}, child = 0, total = tasks;
	if (procs) {
		if (pipe(up) != 0 || (child = fork()) < 0) {
			fprintf(stderr, "schedbench: pipe or fork failed\n");
			exit(1);
		}
		tasks = child == 0 ? tasks / 2 : tasks - tasks / 2;
	}
	int n = tasks + (lock ? 5 : 0);
	pthread_t *t = calloc(n, sizeof *t);
	for (int i = 0; i < n; i++) {
		void *(*fn)(void *) = i < tasks ? busy : i == tasks ? holder : contender;
		if (pthread_create(&t[i], 0, fn, 0) != 0) {
			fprintf(stderr, "schedbench: pthread_create %d failed\n", i);
			exit(1);
		}
	}
	if (procs && child == 0) {
		if (write(up[1], "u", 1) != 1)
			exit(1);
		for (int i = 0; i < n; i++)
			pthread_join(t[i], 0);
		exit(0);
	}
	char c;
	if (procs && read(up[0], &c, 1) != 1) {
		fprintf(stderr, "schedbench: the second process did not start its threads\n");
		exit(1);
	}
	/* To stderr, which sched-fair watches: its window starts once every thread is up. */
	fprintf(stderr, "schedbench: fair: %d threads up\n", n + (procs ? total / 2 : 0));
	for (int i = 0; i < n; i++)
		pthread_join(t[i], 0);
	if (procs) {
		int st;
		if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "schedbench: the second process failed\n");
			exit(1);
		}
	}
	if (lock)
		printf("fair ok %d held %lu %lu\n", total, fair_held[0], fair_held[1]);
	else
		printf("fair ok %d\n", total);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: schedbench MODE N (see the source)\n");
		return 2;
	}
	const char *mode = argv[1];
	int n = atoi(argv[2]);
	if (!strcmp(mode, "yieldthreads"))
		yieldthreads(n);
	else if (!strcmp(mode, "yieldsleep"))
		yieldsleep(n, argc > 3 ? atoi(argv[3]) : 500);
	else if (!strcmp(mode, "wakesame"))
		wake(n, 0);
	else if (!strcmp(mode, "wakecross"))
		wake(n, 1);
	else if (!strcmp(mode, "yieldprocs"))
		yieldprocs(n);
	else if (!strcmp(mode, "yieldsignal"))
		yieldsignal(n);
	else if (!strcmp(mode, "pipewake"))
		pipewake(n);
	else if (!strcmp(mode, "spin")) {
		fair_end = n > 0 ? now() + n * 1e9 : 1e300;
		busy(0);
	} else if (!strcmp(mode, "fair"))
		fair(n, argc > 3 ? atof(argv[3]) : 10, argc > 4 && !strcmp(argv[4], "lock"),
		     argc > 4 && !strcmp(argv[4], "procs"));
	else {
		fprintf(stderr, "schedbench: unknown mode %s\n", mode);
		return 2;
	}
	return 0;
}
