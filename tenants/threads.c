/*
 * Threads: "threads count N" runs 8 threads that add to a shared counter under a mutex, hand
 * off through a condition variable, and are joined; it prints the total. "threads crash" has
 * one thread fault while others wait: the whole process dies of SIGSEGV.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static long counter, turn;
static long rounds;

static void *worker(void *arg)
{
	long id = (long)arg;
	for (long i = 0; i < rounds; i++) {
		pthread_mutex_lock(&mu);
		counter++;
		pthread_mutex_unlock(&mu);
	}
	/* Take turns in id order through the condition variable. */
	pthread_mutex_lock(&mu);
	while (turn != id)
		pthread_cond_wait(&cv, &mu);
	turn++;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	return (void *)(id * 10);
}

static void *crasher(void *arg)
{
	usleep(20000);
	*(volatile int *)8 = 1;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "crash")) {
		pthread_t t;
		pthread_create(&t, 0, crasher, 0);
		for (;;)
			pause();
	}
	rounds = argc > 2 ? atol(argv[2]) : 10000;
	pthread_t ts[8];
	for (long i = 0; i < 8; i++)
		if (pthread_create(&ts[i], 0, worker, (void *)i) != 0) {
			printf("pthread_create failed\n");
			return 1;
		}
	long sum = 0;
	for (int i = 0; i < 8; i++) {
		void *r;
		pthread_join(ts[i], &r);
		sum += (long)r;
	}
	printf("counter %ld turns %ld joined %ld\n", counter, turn, sum);
	return 0;
}
