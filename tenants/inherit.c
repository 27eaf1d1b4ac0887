/* inherit: what a child process and a thread inherit from their parent: nice value and
 * signal mask. Prints one line per check; the same natively. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static void show(const char *who)
{
	sigset_t m;
	sigprocmask(SIG_SETMASK, NULL, &m);
	printf("%s: nice %d, SIGUSR1 blocked %d\n", who, getpriority(PRIO_PROCESS, 0), sigismember(&m, SIGUSR1));
	fflush(stdout);
}

static void *thread(void *arg)
{
	show("thread");
	return arg;
}

int main(void)
{
	sigset_t m;
	sigemptyset(&m);
	sigaddset(&m, SIGUSR1);
	sigprocmask(SIG_BLOCK, &m, NULL);
	setpriority(PRIO_PROCESS, 0, 5);
	show("parent");
	pid_t pid = fork();
	if (pid == 0) {
		show("child");
		_exit(0);
	}
	waitpid(pid, NULL, 0);
	pthread_t th;
	pthread_create(&th, NULL, thread, NULL);
	pthread_join(th, NULL);
	return 0;
}
