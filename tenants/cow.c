/*
 * Copy-on-write: the parent fills a page, then forks 100 children. Each child first reads the
 * page (it must see the parent's data, and the read must not fault in a sandbox that maps
 * eagerly), then writes its own number and checks it; the parent checks its data is intact.
 * Prints "cow ok" or what went wrong.
 */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
	char *page = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED)
		return 1;
	memset(page, 'p', 4096);
	for (int i = 0; i < 100; i++) {
		pid_t pid = fork();
		if (pid < 0) {
			printf("fork failed\n");
			return 1;
		}
		if (pid == 0) {
			for (int j = 0; j < 4096; j++)
				if (page[j] != 'p')
					_exit(10);
			memset(page, i, 4096);
			for (int j = 0; j < 4096; j++)
				if (page[j] != (char)i)
					_exit(11);
			_exit(0);
		}
		int st;
		if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			printf("child %d failed: status %#x\n", i, st);
			return 1;
		}
	}
	for (int j = 0; j < 4096; j++)
		if (page[j] != 'p') {
			printf("parent's page changed\n");
			return 1;
		}
	printf("cow ok\n");
	return 0;
}
