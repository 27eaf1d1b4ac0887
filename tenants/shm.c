/* shm: memory mapped MAP_SHARED|MAP_ANONYMOUS is shared with children after fork (both ways),
 * while MAP_PRIVATE memory is copied. Prints what each side saw. */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
	char *shared = mmap(0, 8192, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	char *private = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (shared == MAP_FAILED || private == MAP_FAILED)
		return 1;
	strcpy(shared, "parent");
	strcpy(shared + 4096, "untouched");
	strcpy(private, "parent");
	pid_t pid = fork();
	if (pid == 0) {
		printf("child sees shared=%s private=%s\n", shared, private);
		fflush(stdout);
		strcpy(shared, "child");
		strcpy(shared + 4096, "second page");
		strcpy(private, "child");
		_exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	printf("parent sees shared=%s/%s private=%s\n", shared, shared + 4096, private);
	return 0;
}
