/*
 * Hostile tenant: tries to get around the sandbox. Each mode prints what it achieved, if anything,
 * and a well-behaved sandbox kills or refuses it before that.
 *
 *   hostile jump execve|open|mmap   find a syscall instruction in the stub and jump to it
 *   hostile write-setup             write into the stub's read-only setup page
 *   hostile grab MIB                allocate and touch MIB mebibytes
 *   hostile wild                    write far outside any mapping
 *   hostile unimplemented           make a system call Endo does not implement
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define STUB_BASE 0x7ff000000000UL
#define SYSMSG_BASE 0x7ff100000000UL

static unsigned char *find_syscall(void)
{
	unsigned char *p = (unsigned char *)STUB_BASE;
	for (int i = 0; i < 4096; i++)
		if (p[i] == 0x0f && p[i + 1] == 0x05)
			return p + i;
	return 0;
}

static long jump(long nr, long a, long b, long c)
{
	unsigned char *target = find_syscall();
	if (!target) {
		printf("no syscall instruction found\n");
		return -1;
	}
	long ret;
	register long r10 __asm__("r10") = 0;
	/* Jump to the stub's syscall; come back through a return address we push. */
	__asm__ volatile("lea 1f(%%rip), %%r11\n"
			 "push %%r11\n"
			 "jmp *%[t]\n"
			 "1:\n"
			 : "=a"(ret)
			 : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), [t] "r"(target)
			 : "rcx", "r11", "memory");
	return ret;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	setvbuf(stdout, 0, _IONBF, 0);
	if (!strcmp(argv[1], "jump") && argc > 2) {
		long r = -1;
		if (!strcmp(argv[2], "execve")) {
			char *args[] = { "/bin/sh", "-c", "echo ESCAPED", 0 };
			r = jump(SYS_execve, (long)"/bin/sh", (long)args, 0);
		} else if (!strcmp(argv[2], "open")) {
			r = jump(SYS_open, (long)"/etc/hostname", 0, 0);
		} else if (!strcmp(argv[2], "mmap")) {
			r = jump(SYS_mmap, 0, 4096, PROT_READ | PROT_WRITE);
		}
		printf("ESCAPED: host call returned %ld\n", r);
		return 0;
	}
	if (!strcmp(argv[1], "write-setup")) {
		*(volatile unsigned long *)SYSMSG_BASE = 0;
		printf("ESCAPED: wrote the setup page\n");
		return 0;
	}
	if (!strcmp(argv[1], "wild")) {
		*(volatile unsigned long *)0x700000000000UL = 1;
		printf("ESCAPED: wrote a wild address\n");
		return 0;
	}
	if (!strcmp(argv[1], "grab") && argc > 2) {
		long mib = atol(argv[2]);
		for (long i = 0; i < mib; i++) {
			char *p = mmap(0, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (p == MAP_FAILED) {
				printf("refused after %ld MiB: %s\n", i, strerror(errno));
				return 1;
			}
			memset(p, 1, 1 << 20);
		}
		printf("GOT %ld MiB\n", mib);
		return 0;
	}
	if (!strcmp(argv[1], "unimplemented")) {
		long r = syscall(SYS_io_setup, 1, 0);
		printf("io_setup: %ld errno %d\n", r, r < 0 ? errno : 0);
		return 0;
	}
	return 2;
}
