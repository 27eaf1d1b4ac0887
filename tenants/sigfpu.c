/*
 * The FPU state survives a signal handler: xmm0 holds a pattern across a kill(2) whose handler
 * overwrites xmm0; after the handler returns the pattern must be back. Prints "fpu ok".
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile int handled;

static void handler(int sig)
{
	__asm__ volatile("pxor %%xmm0, %%xmm0" ::: "xmm0");
	handled = 1;
}

int main(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = handler;
	sigaction(SIGUSR1, &sa, 0);
	unsigned long long out[2], pattern[2] = { 0x1122334455667788ULL, 0x99aabbccddeeff00ULL };
	long pid = syscall(SYS_getpid);
	__asm__ volatile(
		"movdqu (%[p]), %%xmm0\n"
		"mov %[nr], %%eax\n"
		"mov %[pid], %%rdi\n"
		"mov %[sig], %%esi\n"
		"syscall\n"
		"movdqu %%xmm0, (%[o])\n"
		:
		: [p] "r"(pattern), [o] "r"(out), [nr] "i"(SYS_kill), [pid] "r"(pid), [sig] "i"(SIGUSR1)
		: "rax", "rdi", "rsi", "rcx", "r11", "xmm0", "memory");
	if (!handled) {
		printf("handler did not run\n");
		return 1;
	}
	if (out[0] != pattern[0] || out[1] != pattern[1]) {
		printf("xmm0 changed: %llx %llx\n", out[0], out[1]);
		return 1;
	}
	printf("fpu ok\n");
	return 0;
}
