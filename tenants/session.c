/*
 * Sessions, process groups and orphaned groups, each check printing one line of what it saw, so
 * that a run inside Endo can be compared with a native run: `session ids|orphan`. Every check
 * runs in fresh children, whose places do not depend on how the program itself was started.
 * (`session hold` is the program a child execs for the setpgid-after-exec check.)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A pgid no process can have: above any pid_max. */
#define NO_GROUP 0x3ffffff0

static const char *ret(int r)
{
	static char buf[64];
	if (r >= 0)
		return "ok";
	switch (errno) {
	case EPERM: return "EPERM";
	case ESRCH: return "ESRCH";
	case EACCES: return "EACCES";
	case EINVAL: return "EINVAL";
	}
	snprintf(buf, sizeof buf, "errno %d", errno);
	return buf;
}

static void reap(pid_t pid)
{
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
}

/* hold_child forks a child that waits until fd gets EOF (its write end closed), then exits. */
static pid_t hold_child(int rfd, int wfd)
{
	pid_t pid = fork();
	if (pid == 0) {
		char c;
		close(wfd);
		while (read(rfd, &c, 1) != 0 && errno == EINTR)
			;
		_exit(0);
	}
	return pid;
}

/* The session field (6th) of /proc/self/stat. */
static int stat_session(void)
{
	char buf[512];
	int fd = open("/proc/self/stat", O_RDONLY);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	int pid, pgrp, sid;
	char state;
	if (!p || sscanf(p + 2, "%c %d %d %d", &state, &pid, &pgrp, &sid) != 4)
		return -1;
	return sid;
}

static void ids(const char *self)
{
	/* A child's own view: inherited ids, setsid, and what a session leader may not do. */
	pid_t c = fork();
	if (c == 0) {
		pid_t me = getpid();
		printf("child inherits session: %d, group: %d\n", getsid(0) == getsid(getppid()), getpgrp() == getpgid(getppid()));
		printf("getsid(0) is getsid(self): %d\n", getsid(0) == getsid(me));
		printf("stat shows the session: %d\n", stat_session() == getsid(0));
		printf("getsid of nobody: %s\n", ret(getsid(NO_GROUP)));
		pid_t s = setsid();
		printf("setsid: returns pid %d, session %d, group %d\n", s == me, getsid(0) == me, getpgrp() == me);
		printf("stat shows the new session: %d\n", stat_session() == me);
		printf("setsid again: %s\n", ret(setsid()));
		printf("setpgid of a session leader: %s\n", ret(setpgid(0, 0)));
		_exit(0);
	}
	reap(c);

	/* A group leader may not start a session. */
	c = fork();
	if (c == 0) {
		const char *r = ret(setpgid(0, 0));
		printf("setpgid(0, 0): %s, leader %d\n", r, getpgrp() == getpid());
		printf("setsid as a group leader: %s\n", ret(setsid()));
		_exit(0);
	}
	reap(c);

	/* A parent moves its children: a fresh group, a join, then the refusals. */
	c = fork();
	if (c == 0) {
		int p[2];
		pipe(p);
		pid_t a = hold_child(p[0], p[1]);
		pid_t b = hold_child(p[0], p[1]);
		const char *r = ret(setpgid(a, a));
		printf("child into its own group: %s, pgid %d\n", r, getpgid(a) == a);
		r = ret(setpgid(b, a));
		printf("second child joins it: %s, pgid %d\n", r, getpgid(b) == a);
		printf("join a group that is not there: %s\n", ret(setpgid(b, NO_GROUP)));
		printf("negative pgid: %s\n", ret(setpgid(b, -1)));
		printf("no such process: %s\n", ret(setpgid(NO_GROUP, 0)));
		r = ret(setpgid(0, a));
		printf("parent joins the child's group: %s, pgid %d\n", r, getpgrp() == a);
		close(p[1]);
		reap(a);
		reap(b);
		_exit(0);
	}
	reap(c);

	/* EPERM for a child in another session, ESRCH for a grandchild, EACCES after exec. */
	c = fork();
	if (c == 0) {
		int go[2], ready[2], pids[2];
		char ch;
		pipe(go);
		pipe2(ready, O_CLOEXEC);
		pipe(pids);
		pid_t s = fork();
		if (s == 0) {
			/* A session of its own, then the parent learns of it through the pipe's EOF. */
			setsid();
			close(ready[1]);
			close(go[1]);
			while (read(go[0], &ch, 1) != 0 && errno == EINTR)
				;
			_exit(0);
		}
		close(ready[1]);
		while (read(ready[0], &ch, 1) != 0 && errno == EINTR)
			;
		printf("child in another session: %s\n", ret(setpgid(s, s)));
		printf("getsid of that child: %d, not ours %d\n", getsid(s) == s, getsid(0) != s);
		pid_t o = hold_child(go[0], go[1]);
		printf("other child into that session's group: %s\n", ret(setpgid(o, s)));
		printf("self into that session's group: %s\n", ret(setpgid(0, s)));

		pid_t gp = fork();
		if (gp == 0) {
			pid_t gc = hold_child(go[0], go[1]);
			write(pids[1], &gc, sizeof gc);
			close(go[1]);
			reap(gc);
			_exit(0);
		}
		pid_t gc = 0;
		read(pids[0], &gc, sizeof gc);
		const char *r = ret(setpgid(gc, gc));
		printf("a grandchild: %s, same session %d\n", r, getsid(gc) == getsid(0));

		int execd[2];
		pipe2(execd, O_CLOEXEC);
		pid_t e = fork();
		if (e == 0) {
			close(execd[0]);
			close(go[1]);
			execl(self, self, "hold", (char *)NULL);
			_exit(127);
		}
		close(execd[1]);
		while (read(execd[0], &ch, 1) != 0 && errno == EINTR)
			;
		printf("child after exec: %s\n", ret(setpgid(e, e)));
		kill(e, SIGKILL);
		close(go[1]);
		reap(s);
		reap(o);
		reap(gp);
		reap(e);
		_exit(0);
	}
	reap(c);
}

static int hup_pipe = -1;

static void on_hup(int sig)
{
	(void)sig;
	write(hup_pipe, "got SIGHUP\n", 11);
}

/*
 * A child starts a session and forks a grandchild that stops itself in a group of its own; the
 * child exits. The grandchild's group is orphaned (its parent is now outside the session) with a
 * stopped member: it gets SIGHUP, then SIGCONT, and goes on. Then, its group being orphaned, a
 * SIGTSTP does not stop it. A run that never sees it go on gives up after 5 s and kills it.
 */
static void orphan(void)
{
	int p[2], pids[2];
	pipe(p);
	pipe(pids);
	pid_t c = fork();
	if (c == 0) {
		close(p[0]);
		setsid();
		pid_t g = fork();
		if (g == 0) {
			hup_pipe = p[1];
			struct sigaction sa;
			memset(&sa, 0, sizeof sa);
			sa.sa_handler = on_hup;
			sigaction(SIGHUP, &sa, NULL);
			setpgid(0, 0);
			raise(SIGSTOP);
			write(p[1], "continued\n", 10);
			raise(SIGTSTP);
			write(p[1], "not stopped by SIGTSTP\n", 23);
			_exit(0);
		}
		write(pids[1], &g, sizeof g);
		int st;
		while (waitpid(g, &st, WUNTRACED) < 0 && errno == EINTR)
			;
		if (WIFSTOPPED(st))
			write(p[1], "grandchild stopped\n", 19);
		else
			write(p[1], "grandchild not stopped\n", 23);
		_exit(0);
	}
	close(p[1]);
	pid_t g = 0;
	read(pids[0], &g, sizeof g);
	reap(c);
	char buf[256];
	size_t total = 0;
	for (;;) {
		struct pollfd pfd = { .fd = p[0], .events = POLLIN };
		if (poll(&pfd, 1, 5000) == 0) {
			printf("timed out: the grandchild did not go on\n");
			kill(g, SIGKILL);
			break;
		}
		ssize_t n = read(p[0], buf + total, sizeof buf - 1 - total);
		if (n <= 0)
			break;
		total += n;
	}
	buf[total] = 0;
	printf("%s", buf);
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "hold") == 0) {
		pause(); /* until the parent's SIGKILL */
		return 0;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc > 1 && strcmp(argv[1], "ids") == 0)
		ids(argv[0]);
	else if (argc > 1 && strcmp(argv[1], "orphan") == 0)
		orphan();
	else {
		fprintf(stderr, "usage: session ids|orphan\n");
		return 2;
	}
	return 0;
}
