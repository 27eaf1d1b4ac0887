/*
 * A child that exits with 64 MiB mapped and touched, at the test's pace: prints "ready", waits
 * for a byte on stdin, forks the child and waits for it, prints "child done", then waits for
 * stdin to close. The test reads the pod's memory use at each line.
 */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB (1024 * 1024)

int main(void)
{
	char c;
	setvbuf(stdout, 0, _IOLBF, 0);
	printf("ready\n");
	if (read(0, &c, 1) != 1)
		return 1;
	pid_t pid = fork();
	if (pid == 0) {
		char *p = mmap(0, 64 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			_exit(1);
		memset(p, 1, 64 * MIB);
		_exit(0); /* with the 64 MiB still mapped */
	}
	int st;
	waitpid(pid, &st, 0);
	printf("child done: %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	while (read(0, &c, 1) > 0)
		;
	return 0;
}
