/*
 * Opening through /proc/self's magic links reaches the very file, as on Linux: execve of
 * /proc/self/exe runs the program again, open of /proc/self/fd/N gives a new description of the
 * same file (its own offset) or a new end of the same pipe, stat through it sees that file.
 * And prctl's thread name (comm) and parent-death signal. Prints one line per check; the same
 * natively (with /proc mounted) and in Endo.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int reopen(int fd, int flags)
{
	char p[64];
	snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
	return open(p, flags);
}

int main(int argc, char **argv)
{
	if (argc > 1) {
		printf("re-exec: %s\n", argv[1]);
		return 0;
	}
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		execl("/proc/self/exe", "procself", "through /proc/self/exe", (char *)0);
		perror("execl /proc/self/exe");
		_exit(1);
	}
	int st;
	waitpid(pid, &st, 0);
	printf("child status %d\n", WEXITSTATUS(st));

	int p[2];
	if (pipe(p) != 0)
		return 1;
	write(p[1], "through the pipe", 16);
	int r = reopen(p[0], O_RDONLY);
	char buf[64] = { 0 };
	ssize_t n = r >= 0 ? read(r, buf, sizeof buf - 1) : -1;
	printf("pipe reopened: %zd bytes \"%s\"\n", n, n > 0 ? buf : "");

	int f = open("/bin/procself", O_RDONLY);
	char a[4], b[4];
	read(f, a, 4);
	int g = reopen(f, O_RDONLY);
	read(g, b, 4);
	printf("own offset: %s, same bytes: %s\n", lseek(g, 0, SEEK_CUR) == 4 && lseek(f, 0, SEEK_CUR) == 4 ? "yes" : "no",
	       memcmp(a, b, 4) == 0 ? "yes" : "no");
	struct stat s1, s2;
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", f);
	stat(path, &s1);
	fstat(f, &s2);
	printf("stat through the link: same inode %s, size %s\n", s1.st_ino == s2.st_ino ? "yes" : "no",
	       s1.st_size == s2.st_size && s1.st_size > 0 ? "yes" : "no");
	int w = reopen(p[0], O_WRONLY); /* a new end of the same pipe, for writing */
	n = w >= 0 ? write(w, "back", 4) : -1;
	memset(buf, 0, sizeof buf);
	n = n == 4 ? read(p[0], buf, sizeof buf - 1) : -1;
	printf("write end from the read end's link: \"%s\"\n", n > 0 ? buf : "");
	int d = open("/bin", O_RDONLY | O_DIRECTORY);
	int dd = reopen(d, O_RDONLY | O_DIRECTORY);
	printf("directory reopened: %s\n", dd >= 0 ? "yes" : "no");

	/* A thread's name: cut to 15 bytes, shown in comm, inherited by a child. */
	char name[16] = { 0 };
	prctl(PR_SET_NAME, "a-rather-long-thread-name");
	prctl(PR_GET_NAME, name);
	int c = open("/proc/self/comm", O_RDONLY);
	memset(buf, 0, sizeof buf);
	read(c, buf, sizeof buf - 1);
	printf("name: \"%s\", comm: %s", name, buf);
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		prctl(PR_GET_NAME, name);
		printf("child's name: %s\n", name);
		fflush(stdout);
		_exit(0);
	}
	waitpid(pid, &st, 0);

	/* The parent-death signal: a grandchild asks for SIGKILL when its parent dies; its end
	 * closes the pipe the top process reads. */
	int q[2];
	pipe(q);
	pid = fork();
	if (pid == 0) {
		if (fork() == 0) {
			close(q[0]);
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			int sig = 0;
			prctl(PR_GET_PDEATHSIG, &sig);
			write(q[1], sig == SIGKILL ? "k" : "?", 1);
			pause();
			_exit(0);
		}
		close(q[1]);
		usleep(200000); /* let the grandchild ask */
		_exit(0);
	}
	close(q[1]);
	waitpid(pid, &st, 0);
	alarm(10);
	char seen[8] = { 0 };
	int got = 0;
	while (read(q[0], seen + got, 1) == 1 && got < 7)
		got++;
	printf("parent-death signal: asked %s, the pipe closed after %d byte\n", seen, got);
	printf("dumpable %d, no-new-privs %d\n", prctl(PR_GET_DUMPABLE), prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0));
	return 0;
}
