/*
 * Smaller calls programs expect: rt_sigtimedwait (as container inits use it), times,
 * clock_getres, fallocate, preadv/pwritev, flock, personality, getresuid, getcpu, timerfd, inotify, signalfd, fcntl record locks, memfd, futexes shared between processes. Prints one
 * line per check, the same natively (as root) and in Endo.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/signalfd.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/times.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK(what, cond) printf("%s: %s\n", what, (cond) ? "ok" : "FAILED")

static volatile int usr2;

static int pipe_end(void)
{
	int p[2];
	pipe(p);
	return p[0];
}
static void on_usr2(int sig) { (void)sig; usr2++; }

int main(void)
{
	/* sigtimedwait: a blocked signal already pending is taken, with its sender. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, 0);
	kill(getpid(), SIGUSR1);
	siginfo_t si;
	memset(&si, 0, sizeof si);
	int sig = sigtimedwait(&set, &si, 0);
	CHECK("sigtimedwait pending", sig == SIGUSR1 && si.si_signo == SIGUSR1 && si.si_pid == getpid());
	sigset_t pend;
	sigpending(&pend);
	CHECK("taken off pending", !sigismember(&pend, SIGUSR1));
	struct timespec short_wait = { 0, 50 * 1000 * 1000 };
	errno = 0;
	CHECK("sigtimedwait timeout", sigtimedwait(&set, 0, &short_wait) == -1 && errno == EAGAIN);
	struct timespec zero = { 0, 0 };
	errno = 0;
	CHECK("sigtimedwait poll", sigtimedwait(&set, 0, &zero) == -1 && errno == EAGAIN);

	/* ... and one sent later by another process wakes the waiter (a fatal one, blocked, too). */
	pid_t parent = getpid(), pid = fork();
	if (pid == 0) {
		usleep(100 * 1000);
		kill(parent, SIGTERM);
		_exit(0);
	}
	struct timespec long_wait = { 10, 0 };
	memset(&si, 0, sizeof si);
	sig = sigtimedwait(&set, &si, &long_wait);
	CHECK("sigtimedwait woken", sig == SIGTERM && si.si_pid == pid);
	waitpid(pid, 0, 0);

	/* A signal outside the set, not blocked, cuts the wait short: its handler runs. */
	signal(SIGUSR2, on_usr2);
	pid = fork();
	if (pid == 0) {
		usleep(100 * 1000);
		kill(parent, SIGUSR2);
		_exit(0);
	}
	errno = 0;
	sig = sigtimedwait(&set, 0, &long_wait);
	CHECK("sigtimedwait interrupted", sig == -1 && errno == EINTR && usr2 == 1);
	waitpid(pid, 0, 0);
	sigprocmask(SIG_UNBLOCK, &set, 0);

	struct tms tms;
	clock_t c = times(&tms);
	CHECK("times", c != (clock_t)-1 && tms.tms_utime >= 0 && tms.tms_cstime >= 0);
	struct timespec res;
	CHECK("clock_getres", clock_getres(CLOCK_MONOTONIC, &res) == 0 && res.tv_sec == 0 && res.tv_nsec == 1 &&
				      clock_getres(CLOCK_PROCESS_CPUTIME_ID, &res) == 0 && res.tv_nsec == 1);
	CHECK("clock_getres bad clock", clock_getres(12345, &res) == -1 && errno == EINVAL);

	char path[64];
	snprintf(path, sizeof path, "/misccalls-%d", getpid());
	int fd = open(path, O_CREAT | O_RDWR, 0644);
	struct stat st;
	CHECK("fallocate", fallocate(fd, 0, 0, 8192) == 0 && fstat(fd, &st) == 0 && st.st_size == 8192);
	struct iovec w[2] = { { "abc", 3 }, { "def", 3 } };
	CHECK("pwritev", pwritev(fd, w, 2, 100) == 6);
	char a[2], b[4] = { 0 };
	struct iovec r[2] = { { a, 2 }, { b, 3 } };
	CHECK("preadv", preadv(fd, r, 2, 101) == 5 && memcmp(a, "bc", 2) == 0 && memcmp(b, "def", 3) == 0);
	CHECK("offset untouched", lseek(fd, 0, SEEK_CUR) == 0);
	CHECK("preadv2 at the position", preadv2(fd, r, 1, -1, 0) == 2 && lseek(fd, 0, SEEK_CUR) == 2);

	/* flock: another open file description of the same file waits for the lock. */
	CHECK("flock", flock(fd, LOCK_EX) == 0);
	pid = fork();
	if (pid == 0) {
		int fd2 = open(path, O_RDWR);
		int busy = flock(fd2, LOCK_EX | LOCK_NB) == -1 && errno == EWOULDBLOCK;
		int got = flock(fd2, LOCK_EX) == 0; /* waits until the parent lets go */
		_exit(busy && got ? 0 : 1);
	}
	usleep(200 * 1000);
	flock(fd, LOCK_UN);
	int status;
	waitpid(pid, &status, 0);
	CHECK("flock waits, then gets it", WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(fd);
	unlink(path);

	CHECK("personality", personality(0xffffffff) == PER_LINUX);
	uid_t ru, eu, su;
	CHECK("getresuid", getresuid(&ru, &eu, &su) == 0 && ru == 0 && eu == 0 && su == 0);
	unsigned cpu = 999, node = 999;
	CHECK("getcpu", syscall(SYS_getcpu, &cpu, &node, 0) == 0 && cpu < (unsigned)sysconf(_SC_NPROCESSORS_ONLN) &&
				node == 0);

	/* timerfd: a one-shot timer read when it fires, nothing before; an epoll set sees it. */
	int tfd = timerfd_create(CLOCK_MONOTONIC, 0);
	struct itimerspec its = { { 0, 0 }, { 0, 50 * 1000 * 1000 } }, cur;
	CHECK("timerfd_settime", tfd >= 0 && timerfd_settime(tfd, 0, &its, 0) == 0);
	CHECK("timerfd_gettime armed", timerfd_gettime(tfd, &cur) == 0 && cur.it_value.tv_nsec > 0 &&
					       cur.it_value.tv_nsec <= 50 * 1000 * 1000);
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN }, out;
	epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev);
	CHECK("epoll waits for it", epoll_wait(ep, &out, 1, 0) == 0 && epoll_wait(ep, &out, 1, 5000) == 1);
	unsigned long long ticks = 0;
	CHECK("read after it fired", read(tfd, &ticks, 8) == 8 && ticks == 1);
	CHECK("disarmed after", timerfd_gettime(tfd, &cur) == 0 && cur.it_value.tv_sec == 0 && cur.it_value.tv_nsec == 0);
	int ntfd = timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK);
	errno = 0;
	CHECK("nonblocking read", read(ntfd, &ticks, 8) == -1 && errno == EAGAIN);
	struct itimerspec every = { { 0, 10 * 1000 * 1000 }, { 0, 10 * 1000 * 1000 } };
	timerfd_settime(tfd, 0, &every, 0);
	usleep(60 * 1000);
	CHECK("interval ticks add up", read(tfd, &ticks, 8) == 8 && ticks >= 2);
	errno = 0;
	CHECK("settime of a pipe", timerfd_settime(pipe_end(), 0, &its, 0) == -1 && errno == EINVAL);

	/* inotify: what happens in a watched directory, by name, in order; then the watch goes. */
	char wdir[64], wfile[80];
	snprintf(wdir, sizeof wdir, "/inotify-%d", getpid());
	snprintf(wfile, sizeof wfile, "%s/f", wdir);
	mkdir(wdir, 0755);
	int in = inotify_init1(IN_NONBLOCK);
	int wd = inotify_add_watch(in, wdir, IN_CREATE | IN_MODIFY | IN_DELETE);
	CHECK("inotify_add_watch", in >= 0 && wd > 0);
	int wf = open(wfile, O_CREAT | O_WRONLY, 0644);
	write(wf, "x", 1);
	close(wf);
	unlink(wfile);
	inotify_rm_watch(in, wd);
	char evbuf[4096] __attribute__((aligned(8)));
	char seen_ev[256] = "";
	usleep(20 * 1000);
	ssize_t len = read(in, evbuf, sizeof evbuf);
	for (char *e = evbuf; len > 0 && e < evbuf + len;) {
		struct inotify_event *ie = (struct inotify_event *)e;
		const char *what = ie->mask & IN_CREATE ? "create" : ie->mask & IN_MODIFY ? "modify" :
				   ie->mask & IN_DELETE ? "delete" : ie->mask & IN_IGNORED ? "ignored" : "other";
		snprintf(seen_ev + strlen(seen_ev), sizeof seen_ev - strlen(seen_ev), "%s%s%s ", what,
			 ie->len ? ":" : "", ie->len ? ie->name : "");
		e += sizeof *ie + ie->len;
	}
	printf("inotify events: %s\n", seen_ev);
	errno = 0;
	CHECK("inotify_add_watch of a missing file", inotify_add_watch(in, "/nowhere/at/all", IN_CREATE) == -1 &&
							 errno == ENOENT);
	rmdir(wdir);

	/* signalfd: blocked signals read as records; a child's end comes as SIGCHLD (which is
	 * ignored by default, and so must stay pending while blocked). */
	sigset_t sm;
	sigemptyset(&sm);
	sigaddset(&sm, SIGUSR1);
	sigaddset(&sm, SIGCHLD);
	sigprocmask(SIG_BLOCK, &sm, 0);
	int sfd = signalfd(-1, &sm, SFD_NONBLOCK);
	struct pollfd pf = { .fd = sfd, .events = POLLIN };
	CHECK("signalfd idle", sfd >= 0 && poll(&pf, 1, 0) == 0);
	kill(getpid(), SIGUSR1);
	CHECK("signalfd readable", poll(&pf, 1, 1000) == 1 && (pf.revents & POLLIN));
	struct signalfd_siginfo ssi;
	CHECK("signalfd read", read(sfd, &ssi, sizeof ssi) == sizeof ssi && ssi.ssi_signo == SIGUSR1 &&
				      ssi.ssi_pid == (unsigned)getpid());
	errno = 0;
	CHECK("signalfd empty", read(sfd, &ssi, sizeof ssi) == -1 && errno == EAGAIN && poll(&pf, 1, 0) == 0);
	pid = fork();
	if (pid == 0)
		_exit(7);
	CHECK("SIGCHLD through signalfd", poll(&pf, 1, 5000) == 1 && read(sfd, &ssi, sizeof ssi) == sizeof ssi &&
						ssi.ssi_signo == SIGCHLD && ssi.ssi_pid == (unsigned)pid &&
						ssi.ssi_status == 7);
	waitpid(pid, 0, 0);
	errno = 0;
	CHECK("signalfd short buffer", read(sfd, &ssi, 8) == -1 && errno == EINVAL);

	/* fcntl record locks between processes, as SQLite takes them. */
	char lpath[64];
	snprintf(lpath, sizeof lpath, "/locks-%d", getpid());
	int lfd = open(lpath, O_CREAT | O_RDWR, 0644);
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10 };
	CHECK("F_SETLK", fcntl(lfd, F_SETLK, &fl) == 0);
	int lp[2];
	pipe(lp);
	pid = fork();
	if (pid == 0) {
		int cfd = open(lpath, O_RDWR);
		struct flock c = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 5, .l_len = 1 };
		int busy = fcntl(cfd, F_SETLK, &c) == -1 && (errno == EAGAIN || errno == EACCES);
		struct flock g = c;
		fcntl(cfd, F_GETLK, &g);
		struct flock other = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 20, .l_len = 5 };
		int free_range = fcntl(cfd, F_SETLK, &other) == 0;
		write(lp[1], "w", 1);
		int waited = fcntl(cfd, F_SETLKW, &c) == 0; /* until the parent unlocks */
		_exit(busy && g.l_type == F_WRLCK && g.l_start == 0 && g.l_len == 10 && free_range && waited ? 0 : 1);
	}
	char ready;
	read(lp[0], &ready, 1);
	usleep(100 * 1000);
	fl.l_type = F_UNLCK;
	fcntl(lfd, F_SETLK, &fl);
	waitpid(pid, &status, 0);
	CHECK("locks conflict between processes, F_GETLK, F_SETLKW waits", WIFEXITED(status) && WEXITSTATUS(status) == 0);
	unlink(lpath);

	/* memfd: a file of its own, named so in /proc, sealed like Linux's. */
	int mfd = memfd_create("scratch", MFD_ALLOW_SEALING);
	char buf[16];
	CHECK("memfd write and read", write(mfd, "hello", 5) == 5 && pread(mfd, buf, 5, 0) == 5 &&
					      memcmp(buf, "hello", 5) == 0 && fstat(mfd, &st) == 0 && st.st_size == 5);
	char mlink[64], mtarget[64] = { 0 };
	snprintf(mlink, sizeof mlink, "/proc/self/fd/%d", mfd);
	readlink(mlink, mtarget, sizeof mtarget - 1);
	printf("memfd link: %s\n", mtarget);
	char *mp = mmap(0, 4096, PROT_READ, MAP_PRIVATE, mfd, 0);
	CHECK("memfd mapped", mp != MAP_FAILED && memcmp(mp, "hello", 5) == 0);
	CHECK("memfd sealed", fcntl(mfd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK) == 0 &&
				      (fcntl(mfd, F_GET_SEALS) & F_SEAL_WRITE) && write(mfd, "x", 1) == -1 && errno == EPERM);

	/* A futex in shared memory meets across processes; so do process-shared condition variables. */
	struct shared {
		int word;
		pthread_mutex_t mu;
		pthread_cond_t cv;
		int ready;
	} *sh = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pthread_mutexattr_t ma;
	pthread_condattr_t ca;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
	pthread_condattr_init(&ca);
	pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
	pthread_mutex_init(&sh->mu, &ma);
	pthread_cond_init(&sh->cv, &ca);
	pid = fork();
	if (pid == 0) {
		struct timespec five = { 5, 0 };
		long r = syscall(SYS_futex, &sh->word, FUTEX_WAIT, 0, &five, 0, 0);
		int ok = r == 0 && sh->word == 1;
		pthread_mutex_lock(&sh->mu);
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 5;
		int waited = 0;
		while (!sh->ready && waited == 0)
			waited = pthread_cond_timedwait(&sh->cv, &sh->mu, &until);
		ok = ok && sh->ready;
		pthread_mutex_unlock(&sh->mu);
		_exit(ok ? 0 : 1);
	}
	usleep(100 * 1000);
	sh->word = 1;
	syscall(SYS_futex, &sh->word, FUTEX_WAKE, 1, 0, 0, 0);
	usleep(100 * 1000);
	pthread_mutex_lock(&sh->mu);
	sh->ready = 1;
	pthread_cond_signal(&sh->cv);
	pthread_mutex_unlock(&sh->mu);
	waitpid(pid, &status, 0);
	CHECK("futex and condition variable shared with a child", WIFEXITED(status) && WEXITSTATUS(status) == 0);
	return 0;
}
