/* recycle: children that map memory at a fixed address and exit, then children that look
 * there. Each child must see only its own memory: a later child that reads the address, where
 * its own address space maps nothing, is killed by SIGSEGV, whatever the earlier ones mapped.
 * Prints one line per child; the same natively. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define SPOT ((char *)0x5a0000000000UL)

static void report(const char *what, int st)
{
	if (WIFEXITED(st))
		printf("%s: exit %d\n", what, WEXITSTATUS(st));
	else
		printf("%s: signal %d\n", what, WTERMSIG(st));
}

int main(void)
{
	int st;
	setvbuf(stdout, NULL, _IONBF, 0);
	for (int i = 0; i < 4; i++) {
		pid_t pid = fork();
		if (pid == 0) {
			char *p = mmap(SPOT, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
			if (p != SPOT)
				_exit(2);
			strcpy(p, "secret");
			_exit(0);
		}
		waitpid(pid, &st, 0);
		report("writer", st);
	}
	for (int i = 0; i < 4; i++) {
		pid_t pid = fork();
		if (pid == 0) {
			volatile char c = SPOT[0];
			printf("reader saw %d\n", c);
			_exit(1);
		}
		waitpid(pid, &st, 0);
		report("reader", st);
	}
	return 0;
}
