/*
 * Busy threads that need each other: each of N threads announces itself, then spins (no system
 * call) until all have. With fewer vCPUs than threads this finishes only if the sandbox
 * preempts a spinning thread for the others. Prints "spin ok N".
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static atomic_int started;
static int n;

static void *spin(void *arg)
{
	atomic_fetch_add(&started, 1);
	while (atomic_load(&started) < n)
		;
	return 0;
}

int main(int argc, char **argv)
{
	n = argc > 1 ? atoi(argv[1]) : 4;
	pthread_t t[64];
	for (int i = 0; i < n && i < 64; i++)
		pthread_create(&t[i], 0, spin, 0);
	for (int i = 0; i < n && i < 64; i++)
		pthread_join(t[i], 0);
	printf("spin ok %d\n", n);
	return 0;
}
