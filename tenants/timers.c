/*
 * alarm(2) and ITIMER_REAL: what alarm returns, a periodic timer's signals, what getitimer and
 * setitimer report, a timer kept across execve and dropped by fork. Prints one line per check;
 * the output is the same natively. "timers prof" asks for ITIMER_PROF and prints the result.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile int alarms;

static void on_alarm(int sig) { (void)sig; alarms++; }

int main(int argc, char **argv)
{
	setvbuf(stdout, 0, _IOLBF, 0);
	if (argc > 1 && !strcmp(argv[1], "prof")) {
		struct itimerval it = {{0, 10000}, {0, 10000}};
		int r = setitimer(ITIMER_PROF, &it, 0);
		printf("ITIMER_PROF: %s\n", r == 0 ? "ok" : errno == ENOSYS ? "ENOSYS" : strerror(errno));
		return 0;
	}
	if (argc > 1 && !strcmp(argv[1], "after-exec")) {
		/* The alarm set before execve still runs; its handler did not survive. */
		printf("after exec, alarm left: %u\n", alarm(0));
		return 0;
	}
	struct sigaction sa = {.sa_handler = on_alarm};
	sigaction(SIGALRM, &sa, 0);

	printf("first alarm: %u\n", alarm(5));
	printf("second alarm: %u\n", alarm(3));
	printf("cancel: %u\n", alarm(0));
	printf("none left: %u\n", alarm(0));

	struct itimerval it = {{0, 20000}, {0, 20000}}, old;
	setitimer(ITIMER_REAL, &it, 0);
	while (alarms < 3)
		pause();
	getitimer(ITIMER_REAL, &old);
	printf("periodic: 3 signals, interval %ld us, armed %d\n", (long)old.it_interval.tv_usec,
	       old.it_value.tv_sec > 0 || old.it_value.tv_usec > 0);
	struct itimerval off = {{0, 0}, {0, 0}};
	setitimer(ITIMER_REAL, &off, &old);
	printf("stopped: old interval %ld us\n", (long)old.it_interval.tv_usec);
	getitimer(ITIMER_REAL, &old);
	printf("now: %ld %ld\n", (long)old.it_value.tv_usec, (long)old.it_interval.tv_usec);

	struct itimerval bad = {{0, 0}, {0, 1000000}};
	printf("bad usec: %s\n", setitimer(ITIMER_REAL, &bad, 0) == -1 && errno == EINVAL ? "EINVAL" : "accepted");

	/* A blocking sleep cut by the alarm (a late periodic signal may have come before it). */
	int before = alarms;
	alarm(1);
	struct timespec ts = {5, 0};
	int r = nanosleep(&ts, &ts);
	printf("sleep cut: %s, by the alarm %d\n", r == -1 && errno == EINTR ? "EINTR" : "slept", alarms == before + 1);

	/* fork: the child has no alarm; execve keeps it. */
	alarm(30);
	pid_t c = fork();
	if (c == 0) {
		printf("child's alarm: %u\n", alarm(0));
		_exit(0);
	}
	waitpid(c, 0, 0);
	alarm(30);
	execl("/bin/timers", "timers", "after-exec", (char *)0);
	printf("execl failed\n");
	return 1;
}
