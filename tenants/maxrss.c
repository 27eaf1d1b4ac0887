/*
 * ru_maxrss: a process that touches 48 MiB reports at least that much as its peak (getrusage),
 * and its parent sees it in wait4's rusage and in RUSAGE_CHILDREN. Prints one line per check,
 * with the figures rounded to bands, so that the output is the same natively.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB (1024 * 1024)

static const char *band(long kib)
{
	if (kib < 48 * 1024)
		return "below 48 MiB";
	if (kib < 96 * 1024)
		return "48 to 96 MiB";
	return "96 MiB or more";
}

static void touch(size_t n)
{
	char *p = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		exit(1);
	memset(p, 1, n);
	munmap(p, n);
}

int main(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("self before: %s\n", band(ru.ru_maxrss));
	pid_t pid = fork();
	if (pid == 0) {
		touch(50 * MIB);
		_exit(0);
	}
	int st;
	wait4(pid, &st, 0, &ru);
	printf("child in wait4: %s\n", band(ru.ru_maxrss));
	getrusage(RUSAGE_CHILDREN, &ru);
	printf("children: %s\n", band(ru.ru_maxrss));
	touch(50 * MIB);
	getrusage(RUSAGE_SELF, &ru);
	printf("self after, unmapped: %s\n", band(ru.ru_maxrss));
	return 0;
}
