/* TCP connections into a network namespace (contract in nsconnect.h). */
#include "linux/nsconnect.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"

/* The thread does nothing but enter the namespace and make the socket, so
 * a small stack does. */
#define SOCKET_THREAD_STACK (64u * 1024)

struct socket_job {
	int ns_fd, family, type;
	int fd, err;
	const char *failed; /* what failed, for the message */
};

static void *socket_job_run(void *arg)
{
	struct socket_job *j = arg;
	if (setns(j->ns_fd, CLONE_NEWNET) < 0) {
		j->err = errno;
		j->failed = "enter the sandbox's network namespace";
		return NULL;
	}
	j->fd = socket(j->family, j->type | SOCK_CLOEXEC, 0);
	if (j->fd < 0) {
		j->err = errno;
		j->failed = "create a socket in the sandbox's network namespace";
	}
	/* Returning ends the thread, and its membership of the namespace. */
	return NULL;
}

int sandlot__netns_socket(int ns_fd, int family, int type, sandlot_error_t **err)
{
	struct socket_job j = { .ns_fd = ns_fd, .family = family, .type = type, .fd = -1 };
	pthread_attr_t attr;
	pthread_t th;
	int rc = pthread_attr_init(&attr);
	if (rc == 0) {
		pthread_attr_setstacksize(&attr, SOCKET_THREAD_STACK);
		rc = pthread_create(&th, &attr, socket_job_run, &j);
		pthread_attr_destroy(&attr);
	}
	if (rc != 0)
		return sandlot__error_errno(err, rc, "start a thread to enter the sandbox's network "
					    "namespace");
	pthread_join(th, NULL);
	if (j.fd < 0)
		return sandlot__error_errno(err, j.err ? j.err : EIO, "%s",
					    j.failed ? j.failed : "create a socket");
	return j.fd;
}

/* Wait for a non-blocking connect to finish: 0, or -1 with errno. */
static int wait_connected(int fd, int timeout_ms)
{
	uint64_t deadline = sandlot__now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		int64_t left = (int64_t)(deadline - sandlot__now_ms());
		if (left <= 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		int r = poll(&p, 1, (int)left);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			continue;
		int soerr = 0;
		socklen_t len = sizeof(soerr);
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
			return -1;
		if (soerr) {
			errno = soerr;
			return -1;
		}
		return 0;
	}
}

/* One attempt on one address.  Returns the socket, or -1: with errno when
 * the connection failed, or with *setup set (errno 0) when the namespace or
 * the socket could not be had at all. */
static int try_connect(int ns_fd, const struct sockaddr *sa, socklen_t salen, int timeout_ms,
		       sandlot_error_t **setup)
{
	cleanup_close int fd = sandlot__netns_socket(ns_fd, sa->sa_family,
						     SOCK_STREAM | SOCK_NONBLOCK, setup);
	if (fd < 0) {
		errno = 0;
		return -1;
	}
	if (connect(fd, sa, salen) < 0) {
		if (errno != EINPROGRESS && errno != EINTR)
			return -1;
		if (wait_connected(fd, timeout_ms) < 0)
			return -1;
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)
		return -1;
	return steal_fd(&fd);
}

int sandlot__netns_connect_loopback(int ns_fd, uint16_t port, int timeout_ms,
				    sandlot_error_t **err)
{
	struct sockaddr_in v4 = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sockaddr_in6 v6 = { .sin6_family = AF_INET6, .sin6_port = htons(port),
				   .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	int fd = try_connect(ns_fd, (struct sockaddr *)&v4, sizeof(v4), timeout_ms, err);
	int e4 = errno;
	if (fd >= 0 || e4 == 0)
		return fd; /* connected, or no socket at all (err set) */
	sandlot_error_t *setup = NULL;
	if (e4 == ECONNREFUSED) {
		/* A server bound to [::1] only.  An error here (no IPv6 in the
		 * namespace, refused too) keeps the IPv4 answer. */
		fd = try_connect(ns_fd, (struct sockaddr *)&v6, sizeof(v6), timeout_ms, &setup);
		sandlot_error_free(setup);
		if (fd >= 0)
			return fd;
	}
	if (e4 == ECONNREFUSED)
		return sandlot__error(err, ECONNREFUSED,
				      "nothing is listening on port %u inside the sandbox (connection "
				      "refused on 127.0.0.1 and [::1])", (unsigned)port);
	if (e4 == ETIMEDOUT)
		return sandlot__error(err, ETIMEDOUT,
				      "port %u inside the sandbox did not accept the connection within "
				      "%d ms", (unsigned)port, timeout_ms);
	return sandlot__error_errno(err, e4 ? e4 : EIO, "connect to port %u inside the sandbox",
				    (unsigned)port);
}
