/*
 * System calls from call sites that Endo patches ("mov $nr, %eax; syscall"): results, a signal
 * taken at such a call with the FPU state kept, a blocking call restarted after a handler, threads
 * (whose calls trap again) and fork. Prints one line per check; the output is the same natively.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* One call site each, adjacent mov and syscall, as libc's wrappers have them. */
static long site_kill(long pid, long sig, const unsigned long long *in, unsigned long long *out)
{
	long ret;
	__asm__ volatile(
		"movdqu (%[in]), %%xmm0\n"
		"mov %[pid], %%rdi\n"
		"mov %[sig], %%rsi\n"
		"mov $62, %%eax\n"
		"syscall\n"
		"movdqu %%xmm0, (%[out])\n"
		: "=a"(ret)
		: [in] "r"(in), [out] "r"(out), [pid] "r"(pid), [sig] "r"(sig)
		: "rdi", "rsi", "rcx", "r11", "xmm0", "memory");
	return ret;
}

static long site_read(long fd, void *buf, long n)
{
	long ret;
	__asm__ volatile(
		"mov %[fd], %%rdi\n"
		"mov %[buf], %%rsi\n"
		"mov %[n], %%rdx\n"
		"mov $0, %%eax\n"
		"syscall\n"
		: "=a"(ret)
		: [fd] "r"(fd), [buf] "r"(buf), [n] "r"(n)
		: "rdi", "rsi", "rdx", "rcx", "r11", "memory");
	return ret;
}

static volatile int handled;

static void handler(int sig)
{
	__asm__ volatile("pxor %%xmm0, %%xmm0" ::: "xmm0");
	handled++;
}

static void *thread_main(void *arg)
{
	long *pid = arg;
	for (int i = 0; i < 200; i++)
		if (getpid() != *pid)
			return (void *)1;
	return (void *)(long)(syscall(SYS_gettid) == *pid);
}

int main(void)
{
	setvbuf(stdout, 0, _IONBF, 0);
	long pid = getpid();
	int same = 1;
	for (int i = 0; i < 1000; i++)
		same &= getpid() == pid;
	printf("getpid the same 1000 times: %d\n", same);

	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = handler;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, 0);
	unsigned long long in[2] = { 0x1122334455667788ULL, 0x99aabbccddeeff00ULL }, out[2];
	int kept = 0;
	for (int i = 0; i < 5; i++) {
		out[0] = out[1] = 0;
		site_kill(pid, SIGUSR1, in, out);
		kept += out[0] == in[0] && out[1] == in[1];
	}
	printf("signals at the call: %d handled, xmm0 kept %d times\n", handled, kept);

	/* A read that blocks, is interrupted by a handled SA_RESTART signal, and goes on. */
	int p[2];
	pipe(p);
	char c = 0;
	write(p[1], "a", 1);
	site_read(p[0], &c, 1); /* the site traps once here, and is patched */
	handled = 0;
	pid_t child = fork();
	if (child == 0) {
		struct timespec ts = { 0, 100 * 1000 * 1000 };
		nanosleep(&ts, 0);
		kill(getppid(), SIGUSR1);
		nanosleep(&ts, 0);
		write(p[1], "b", 1);
		_exit(0);
	}
	long n = site_read(p[0], &c, 1);
	printf("read after a handled signal: %ld byte '%c', %d handler run\n", n, c, handled);
	int st;
	waitpid(child, &st, 0);

	/* With a second thread, patched sites trap again; both threads get right answers. */
	pthread_t th;
	void *res;
	pthread_create(&th, 0, thread_main, &pid);
	for (int i = 0; i < 200; i++)
		same &= getpid() == pid;
	pthread_join(th, &res);
	printf("threads: main %d, thread %s\n", same, res == 0 ? "ok" : "wrong");
	same = 1;
	for (int i = 0; i < 100; i++)
		same &= getpid() == pid;
	printf("after join: %d\n", same);

	/* A forked child runs the same patched code with its own pid. */
	int fds[2];
	pipe(fds);
	child = fork();
	if (child == 0) {
		long mine = getpid();
		char ok = mine != pid && mine == syscall(SYS_getpid) ? 'y' : 'n';
		write(fds[1], &ok, 1);
		_exit(0);
	}
	char ok = '?';
	read(fds[0], &ok, 1);
	waitpid(child, &st, 0);
	printf("child's getpid is its own: %c\n", ok);
	return 0;
}
