/*
 * socketpair(AF_UNIX): stream and datagram pairs between a process and its child, send/recv and
 * their msg forms, shutdown, options and names. Prints one line per check, the same natively and
 * in Endo.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(what, cond) printf("%s: %s\n", what, (cond) ? "ok" : "FAILED")

int main(void)
{
	int sv[2];
	CHECK("socketpair", socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
	char buf[64] = { 0 };
	CHECK("write and read", write(sv[0], "ping", 4) == 4 && read(sv[1], buf, sizeof buf) == 4 &&
					memcmp(buf, "ping", 4) == 0);
	errno = 0;
	CHECK("recv MSG_DONTWAIT empty", recv(sv[1], buf, sizeof buf, MSG_DONTWAIT) == -1 && errno == EAGAIN);
	pid_t pid = fork();
	if (pid == 0) {
		close(sv[0]);
		usleep(50 * 1000);
		send(sv[1], "from child", 10, 0);
		recv(sv[1], buf, sizeof buf, 0);
		send(sv[1], buf, 4, 0); /* echo */
		_exit(0);
	}
	close(sv[1]);
	memset(buf, 0, sizeof buf);
	CHECK("blocking recv woken", recv(sv[0], buf, sizeof buf, 0) == 10 && memcmp(buf, "from child", 10) == 0);
	struct iovec iov[2] = { { "ab", 2 }, { "cd", 2 } };
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = 2 };
	CHECK("sendmsg", sendmsg(sv[0], &m, 0) == 4);
	char x[2], y[2];
	struct iovec riov[2] = { { x, 2 }, { y, 2 } };
	struct msghdr rm = { .msg_iov = riov, .msg_iovlen = 2 };
	CHECK("recvmsg", recvmsg(sv[0], &rm, 0) == 4 && memcmp(x, "ab", 2) == 0 && memcmp(y, "cd", 2) == 0 &&
				 rm.msg_flags == 0);
	int st;
	waitpid(pid, &st, 0);
	CHECK("peer gone: end of stream", read(sv[0], buf, sizeof buf) == 0);

	int dg[2];
	socketpair(AF_UNIX, SOCK_DGRAM, 0, dg);
	send(dg[0], "one", 3, 0);
	send(dg[0], "three", 5, 0);
	CHECK("datagrams keep their bounds", recv(dg[1], buf, sizeof buf, 0) == 3 && recv(dg[1], buf, sizeof buf, 0) == 5);
	int type = 0;
	socklen_t len = sizeof type;
	CHECK("SO_TYPE", getsockopt(dg[0], SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_DGRAM && len == 4);
	int size = 65536;
	CHECK("SO_SNDBUF", setsockopt(dg[0], SOL_SOCKET, SO_SNDBUF, &size, sizeof size) == 0);
	struct sockaddr_un sa;
	len = sizeof sa;
	CHECK("getsockname", getsockname(dg[0], (struct sockaddr *)&sa, &len) == 0 && sa.sun_family == AF_UNIX &&
				     len == sizeof(sa_family_t));
	CHECK("shutdown", shutdown(dg[1], SHUT_RD) == 0);
	int np[2];
	pipe(np);
	errno = 0;
	CHECK("not a socket", send(np[1], "x", 1, 0) == -1 && errno == ENOTSOCK);
	return 0;
}
