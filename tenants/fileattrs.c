/*
 * The calls of ln, chmod, chown, touch, mkfifo, df, free and sync, in a directory of its own:
 * prints one line per check, the same natively (as root) and in Endo.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysinfo.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <utime.h>

#define CHECK(what, cond) printf("%s: %s\n", what, (cond) ? "ok" : "FAILED")

int main(void)
{
	char dir[64];
	snprintf(dir, sizeof dir, "/fileattrs-%d", getpid());
	if (mkdir(dir, 0755) != 0 || chdir(dir) != 0) {
		perror(dir);
		return 1;
	}
	int fd = open("f", O_CREAT | O_WRONLY, 0644);
	write(fd, "hello world", 11);
	struct stat st, lst;

	CHECK("symlink", symlink("f", "l") == 0);
	char buf[64] = { 0 };
	CHECK("readlink", readlink("l", buf, sizeof buf) == 1 && buf[0] == 'f');
	int dfd = open(".", O_RDONLY | O_DIRECTORY);
	CHECK("symlinkat", symlinkat("/nowhere", dfd, "dangling") == 0 && lstat("dangling", &lst) == 0 &&
				   S_ISLNK(lst.st_mode) && stat("dangling", &st) != 0);
	CHECK("link", link("f", "h") == 0 && stat("h", &st) == 0 && st.st_nlink == 2);
	struct stat fst;
	stat("f", &fst);
	CHECK("same inode", st.st_ino == fst.st_ino);
	CHECK("linkat", linkat(dfd, "f", dfd, "h2", 0) == 0 && stat("f", &st) == 0 && st.st_nlink == 3);

	CHECK("chmod", chmod("f", 0600) == 0 && stat("f", &st) == 0 && (st.st_mode & 07777) == 0600);
	CHECK("fchmod", fchmod(fd, 0640) == 0 && fstat(fd, &st) == 0 && (st.st_mode & 07777) == 0640);
	CHECK("fchmodat", fchmodat(dfd, "f", 04711, 0) == 0 && stat("f", &st) == 0 && (st.st_mode & 07777) == 04711);
	CHECK("chmod through a symlink", chmod("l", 0604) == 0 && stat("f", &st) == 0 && (st.st_mode & 07777) == 0604);

	CHECK("chown", chown("f", 12, 34) == 0 && stat("f", &st) == 0 && st.st_uid == 12 && st.st_gid == 34);
	CHECK("chown -1 keeps", chown("f", -1, 56) == 0 && stat("f", &st) == 0 && st.st_uid == 12 && st.st_gid == 56);
	CHECK("lchown", lchown("l", 7, 8) == 0 && lstat("l", &lst) == 0 && lst.st_uid == 7 && stat("f", &st) == 0 &&
				st.st_uid == 12);
	CHECK("fchown", fchown(fd, 0, 0) == 0 && fstat(fd, &st) == 0 && st.st_uid == 0 && st.st_gid == 0);
	CHECK("fchownat nofollow", fchownat(dfd, "l", 9, 9, AT_SYMLINK_NOFOLLOW) == 0 && lstat("l", &lst) == 0 &&
					   lst.st_uid == 9);

	struct timespec ts[2] = { { 1000000000, 5 }, { 1234567890, 123456789 } };
	CHECK("utimensat", utimensat(AT_FDCWD, "f", ts, 0) == 0 && stat("f", &st) == 0 &&
				   st.st_mtim.tv_sec == 1234567890 && st.st_mtim.tv_nsec == 123456789 &&
				   st.st_atim.tv_sec == 1000000000);
	struct timespec omit[2] = { { 0, UTIME_OMIT }, { 42, 0 } };
	CHECK("utimensat UTIME_OMIT", utimensat(AT_FDCWD, "f", omit, 0) == 0 && stat("f", &st) == 0 &&
					      st.st_mtim.tv_sec == 42 && st.st_atim.tv_sec == 1000000000);
	CHECK("utimensat nofollow", utimensat(dfd, "l", ts, AT_SYMLINK_NOFOLLOW) == 0 && lstat("l", &lst) == 0 &&
					    lst.st_mtim.tv_sec == 1234567890 && stat("f", &st) == 0 &&
					    st.st_mtim.tv_sec == 42);
	CHECK("futimens", futimens(fd, ts) == 0 && fstat(fd, &st) == 0 && st.st_mtim.tv_sec == 1234567890);
	struct timeval tv[2] = { { 77, 0 }, { 88, 500000 } };
	CHECK("utimes", utimes("f", tv) == 0 && stat("f", &st) == 0 && st.st_mtim.tv_sec == 88 &&
				st.st_mtim.tv_nsec == 500000000);
	struct utimbuf ub = { 99, 111 };
	CHECK("utime", utime("f", &ub) == 0 && stat("f", &st) == 0 && st.st_mtim.tv_sec == 111 && st.st_atim.tv_sec == 99);
	time_t before = time(0);
	CHECK("utime now", utime("f", 0) == 0 && stat("f", &st) == 0 && st.st_mtim.tv_sec >= before);
	struct timespec bad[2] = { { 0, 1000000000 }, { 0, 0 } };
	CHECK("utimensat bad nsec", utimensat(AT_FDCWD, "f", bad, 0) == -1);

	CHECK("truncate", truncate("f", 5) == 0 && stat("f", &st) == 0 && st.st_size == 5);
	CHECK("mknod fifo", mknod("p", S_IFIFO | 0666, 0) == 0 && stat("p", &st) == 0 && S_ISFIFO(st.st_mode));
	CHECK("mkfifoat", mkfifoat(dfd, "p2", 0600) == 0 && stat("p2", &st) == 0 && S_ISFIFO(st.st_mode));

	struct statfs sf, fsf;
	CHECK("statfs", statfs(".", &sf) == 0 && sf.f_bsize > 0 && sf.f_blocks > 0);
	CHECK("fstatfs", fstatfs(fd, &fsf) == 0 && fsf.f_type == sf.f_type && fsf.f_bsize == sf.f_bsize);

	sync();
	CHECK("syncfs", syncfs(fd) == 0);
	struct sysinfo si;
	CHECK("sysinfo", sysinfo(&si) == 0 && si.totalram > 0 && si.freeram <= si.totalram && si.mem_unit >= 1 &&
				 si.procs >= 1);
	CHECK("getgroups", getgroups(0, 0) >= 0);

	const char *names[] = { "f", "l", "dangling", "h", "h2", "p", "p2" };
	for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++)
		unlink(names[i]);
	chdir("/");
	CHECK("cleanup", rmdir(dir) == 0);
	return 0;
}
