/* spawn: the ways a program starts another without a full fork, each waited for and reported:
 * vfork then _exit, vfork then execve, posix_spawn (clone with CLONE_VM|CLONE_VFORK in glibc),
 * and many vforks in a row whose children exit at once (a parent must be let go however early
 * its child is done). Prints one line each; the same natively. */
#define _GNU_SOURCE
#include <spawn.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void report(const char *what, int st)
{
	if (WIFEXITED(st))
		printf("%s: exit %d\n", what, WEXITSTATUS(st));
	else
		printf("%s: signal %d\n", what, WTERMSIG(st));
	fflush(stdout);
}

int main(void)
{
	int st;
	pid_t pid = vfork();
	if (pid == 0)
		_exit(3);
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return 1;
	report("vfork, _exit", st);

	pid = vfork();
	if (pid == 0) {
		char *argv[] = { "hello", "from", "vfork", 0 };
		execve("/bin/hello", argv, environ);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return 1;
	report("vfork, execve", st);

	char *argv[] = { "hello", "spawned", 0 };
	if (posix_spawn(&pid, "/bin/hello", 0, 0, argv, environ) != 0 || waitpid(pid, &st, 0) != pid)
		return 1;
	report("posix_spawn", st);

	int bad = 0;
	for (int i = 0; i < 300; i++) {
		pid = vfork();
		if (pid == 0)
			_exit(i & 0x7f);
		if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != (i & 0x7f))
			bad++;
	}
	printf("300 vforks: %d wrong\n", bad);
	return 0;
}
