/*
 * Pipe transfers as Linux does them: a blocking write larger than the pipe's buffer writes whole
 * while a reader drains it; a non-blocking one writes what fits, then EAGAIN; a read returns what
 * is there without waiting for more; EPIPE once the reader is gone; a blocking write cut short by
 * a signal after part of it went returns the part. Prints one line per check.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char big[300000];

static const char *err(long r)
{
	if (r >= 0)
		return "ok";
	return errno == EAGAIN ? "EAGAIN" : errno == EPIPE ? "EPIPE" : errno == EINTR ? "EINTR" : "other";
}

static void pause_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
	nanosleep(&ts, 0);
}

static void on_alarm(int sig) { (void)sig; }

int main(void)
{
	int p[2];
	setvbuf(stdout, 0, _IOLBF, 0);
	memset(big, 'x', sizeof big);

	/* Blocking write of 300000 bytes: a slow reader takes it all, the write returns it all. */
	pipe(p);
	pid_t c = fork();
	if (c == 0) {
		close(p[1]);
		char buf[4096];
		long total = 0, n;
		pause_ms(20);
		while ((n = read(p[0], buf, sizeof buf)) > 0)
			total += n;
		printf("reader got %ld\n", total);
		fflush(stdout);
		_exit(0);
	}
	close(p[0]);
	long n = write(p[1], big, sizeof big);
	printf("blocking write: %ld\n", n);
	fflush(stdout);
	close(p[1]);
	waitpid(c, 0, 0);

	/* Non-blocking: what fits, then EAGAIN; a read returns what is there. */
	pipe(p);
	fcntl(p[1], F_SETFL, O_NONBLOCK);
	fcntl(p[0], F_SETFL, O_NONBLOCK);
	n = write(p[1], big, sizeof big);
	printf("non-blocking write: %ld\n", n);
	n = write(p[1], big, 10);
	printf("full pipe: %s\n", err(n));
	char buf[100000];
	n = read(p[0], buf, sizeof buf);
	printf("read what is there: %ld\n", n);
	n = read(p[0], buf, sizeof buf);
	printf("empty pipe: %s\n", err(n));
	close(p[0]);
	close(p[1]);

	/* A blocking read with 10 bytes there returns 10. */
	pipe(p);
	write(p[1], big, 10);
	n = read(p[0], buf, sizeof buf);
	printf("short read: %ld\n", n);

	/* The reader gone: EPIPE (SIGPIPE ignored). */
	signal(SIGPIPE, SIG_IGN);
	close(p[0]);
	n = write(p[1], big, 10);
	printf("no reader: %s\n", err(n));
	close(p[1]);

	/* A blocking write into a pipe nobody reads, cut by a signal after 65536 bytes went in. */
	pipe(p);
	struct sigaction sa = {.sa_handler = on_alarm};
	sigaction(SIGALRM, &sa, 0);
	alarm(1);
	n = write(p[1], big, sizeof big);
	printf("interrupted write: %ld\n", n);
	alarm(1);
	n = write(p[1], big, 10);
	printf("then, into a full pipe: %s\n", err(n));
	close(p[0]);
	close(p[1]);

	/* sendfile into a pipe nobody reads: what fits, then the signal cuts it. */
	pipe(p);
	int in = open("/bin/pipes", O_RDONLY);
	alarm(1);
	n = sendfile(p[1], in, 0, 200000);
	printf("interrupted sendfile: %ld\n", n);
	return 0;
}
