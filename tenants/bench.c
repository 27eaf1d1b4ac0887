/*
 * Micro-benchmarks that run the same natively and in Endo; each prints one line "ns=<value>",
 * timed inside the process with the vDSO clock, so process start does not count.
 *
 *   bench getpid N     ns per getpid system call (N calls)
 *   bench touch MIB    ns per page for mmap of MIB mebibytes and a first write to each page
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
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
	return 2;
}
