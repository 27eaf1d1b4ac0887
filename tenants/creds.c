/*
 * User and group ids, as a root entrypoint drops them (gosu, su-exec): a child gives up root for
 * uid/gid 1000 and the host's permission checks then apply to it. Prints one line per check, the
 * same natively (run as root) and in Endo.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(what, cond) printf("%s: %s\n", what, (cond) ? "ok" : "FAILED")

int main(void)
{
	char dir[64], secret[80], mine[80];
	snprintf(dir, sizeof dir, "/creds-%d", getpid());
	snprintf(secret, sizeof secret, "%s/secret", dir);
	snprintf(mine, sizeof mine, "%s/mine", dir);
	mkdir(dir, 0777);
	chmod(dir, 0777);
	int fd = open(secret, O_CREAT | O_WRONLY, 0600);
	write(fd, "root only", 9);
	close(fd);
	CHECK("root", getuid() == 0 && geteuid() == 0);
	fflush(stdout);

	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid == 0) {
		gid_t g[1] = { 2000 };
		CHECK("setgroups", setgroups(1, g) == 0 && getgroups(0, 0) == 1);
		CHECK("setgid", setgid(1000) == 0 && getgid() == 1000 && getegid() == 1000);
		CHECK("setuid", setuid(1000) == 0 && getuid() == 1000 && geteuid() == 1000);
		uid_t r, e, s;
		getresuid(&r, &e, &s);
		CHECK("saved uid gone too", s == 1000);
		errno = 0;
		CHECK("no way back", setuid(0) == -1 && errno == EPERM);
		errno = 0;
		CHECK("root's file refused", open(secret, O_RDONLY) == -1 && errno == EACCES);
		int m = open(mine, O_CREAT | O_WRONLY, 0644);
		struct stat st;
		CHECK("a new file is its own", m >= 0 && fstat(m, &st) == 0 && st.st_uid == 1000 && st.st_gid == 1000);
		errno = 0;
		CHECK("chown refused", fchown(m, 0, 0) == -1 && errno == EPERM);
		errno = 0;
		CHECK("kill root refused", kill(parent, 0) == -1 && errno == EPERM);
		errno = 0;
		CHECK("setgroups refused", setgroups(0, 0) == -1 && errno == EPERM);
		char status[4096] = { 0 };
		int sf = open("/proc/self/status", O_RDONLY);
		if (sf >= 0) {
			read(sf, status, sizeof status - 1);
			CHECK("status shows it", strstr(status, "Uid:\t1000\t1000\t1000\t1000\n") != 0);
		} else {
			CHECK("status shows it", 1);
		}
		fflush(stdout);
		_exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	CHECK("child done", WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* setresuid with the saved id: a temporary drop and back. */
	CHECK("seteuid and back", seteuid(1000) == 0 && geteuid() == 1000 && open(secret, O_RDONLY) == -1 &&
					  seteuid(0) == 0 && open(secret, O_RDONLY) >= 0);
	unlink(secret);
	unlink(mine);
	rmdir(dir);
	return 0;
}
