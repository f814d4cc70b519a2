/* Network namespaces owned by the host, and the egress plumbing inside
 * them (see netns.h). */
#include "linux/netns.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/netlink.h>

#include "common/cleanup.h"
#include "common/rtnl.h"
#include "common/util.h"

static int open_current(void)
{
	/* thread-self: the namespace of this thread, which may differ from
	 * the process's (/proc/self is the thread group leader). */
	return open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
}

void sandlot__netns_leave(int *saved_fd)
{
	if (*saved_fd < 0)
		return;
	if (setns(*saved_fd, CLONE_NEWNET) < 0) {
		fprintf(stderr, "sandlot: cannot return to the host network namespace: %s\n",
			strerror(errno));
		abort();
	}
	close(*saved_fd);
	*saved_fd = -1;
}

int sandlot__netns_enter(int ns_fd, int *saved_fd, sandlot_error_t **err)
{
	*saved_fd = open_current();
	if (*saved_fd < 0)
		return sandlot__error_errno(err, errno, "open the current network namespace");
	if (setns(ns_fd, CLONE_NEWNET) < 0) {
		int e = errno;
		close(*saved_fd);
		*saved_fd = -1;
		return sandlot__error_errno(err, e, "enter the sandbox's network namespace");
	}
	return 0;
}

static int loopback_up(sandlot_error_t **err)
{
	cleanup_close int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return sandlot__error_errno(err, errno, "socket for loopback");
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, "lo");
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		return sandlot__error_errno(err, errno, "get loopback flags");
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		return sandlot__error_errno(err, errno, "bring loopback up");
	return 0;
}

int sandlot__netns_new(int *ns_fd, int *saved_fd, sandlot_error_t **err)
{
	*ns_fd = -1;
	*saved_fd = open_current();
	if (*saved_fd < 0)
		return sandlot__error_errno(err, errno, "open the current network namespace");
	if (unshare(CLONE_NEWNET) < 0) {
		int e = errno;
		close(*saved_fd);
		*saved_fd = -1;
		return sandlot__error_errno(err, e, "create a network namespace");
	}
	*ns_fd = open_current();
	if (*ns_fd < 0) {
		sandlot__error_errno(err, errno, "open the new network namespace");
		goto fail;
	}
	if (loopback_up(err) < 0)
		goto fail;
	return 0;
fail:
	sandlot__netns_leave(saved_fd);
	if (*ns_fd >= 0)
		close(*ns_fd);
	*ns_fd = -1;
	return -1;
}

/* ---- rtnetlink: the address and the default route ------------------------ */

static int address_and_route(sandlot_error_t **err)
{
	cleanup_close int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (fd < 0)
		return sandlot__error_errno(err, errno, "netlink socket");
	int lo = (int)if_nametoindex("lo");
	if (lo <= 0)
		return sandlot__error_errno(err, errno, "find loopback");
	if (sandlot__rtnl_add_addr(fd, lo, SANDLOT_NETNS_ADDR, 32) < 0)
		return sandlot__error_errno(err, errno, "add the sandbox's address");
	/* default dev lo src ADDR: the source makes connections look like
	 * they come from the sandbox's address rather than 0.0.0.0. */
	if (sandlot__rtnl_add_default_route(fd, lo, 0, SANDLOT_NETNS_ADDR) < 0)
		return sandlot__error_errno(err, errno, "add the sandbox's default route");
	return 0;
}

/* ---- listeners ------------------------------------------------------------------ */

static int listener(int type, uint16_t port, sandlot_error_t **err)
{
	cleanup_close int fd = socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return sandlot__error_errno(err, errno, "egress listener socket");
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		return sandlot__error_errno(err, errno, "bind the egress listener on port %u", port);
	if (type == SOCK_STREAM && listen(fd, 512) < 0)
		return sandlot__error_errno(err, errno, "listen on port %u", port);
	return steal_fd(&fd);
}

int sandlot__netns_egress(int ns_fd, int redirect, int fds[SANDLOT_NETNS_NFDS],
			  struct sandlot_nft **nft, sandlot_error_t **err)
{
	/* Set up already: the context reaches the namespace from here. */
	if (fds[0] >= 0 && *nft)
		return sandlot__nft_load(ns_fd, redirect, nft, err);
	int saved;
	if (sandlot__netns_enter(ns_fd, &saved, err) < 0)
		return -1;
	int made[SANDLOT_NETNS_NFDS] = { -1, -1, -1 };
	int fresh = fds[0] < 0;
	sandlot__trace("net: enter");
	if (fresh) {
		if (address_and_route(err) < 0)
			goto fail;
		sandlot__trace("net: address, route");
		made[SANDLOT_NETNS_FD_PROXY] = listener(SOCK_STREAM, SANDLOT_NETNS_PROXY_PORT, err);
		if (made[SANDLOT_NETNS_FD_PROXY] < 0)
			goto fail;
		made[SANDLOT_NETNS_FD_DNS_UDP] = listener(SOCK_DGRAM, 53, err);
		if (made[SANDLOT_NETNS_FD_DNS_UDP] < 0)
			goto fail;
		made[SANDLOT_NETNS_FD_DNS_TCP] = listener(SOCK_STREAM, 53, err);
		if (made[SANDLOT_NETNS_FD_DNS_TCP] < 0)
			goto fail;
	}
	sandlot__trace("net: listeners");
	if (sandlot__nft_load(ns_fd, redirect, nft, err) < 0)
		goto fail;
	sandlot__trace("net: rules");
	sandlot__netns_leave(&saved);
	if (fresh)
		memcpy(fds, made, sizeof(made));
	return 0;
fail:
	sandlot__netns_leave(&saved);
	for (int i = 0; i < SANDLOT_NETNS_NFDS; i++)
		if (made[i] >= 0)
			close(made[i]);
	return -1;
}

/* ---- namespaces made ahead ------------------------------------------------ */

int sandlot__netns_make(int egress, struct sandlot_netns_ready *r, sandlot_error_t **err)
{
	r->ns_fd = -1;
	for (int i = 0; i < SANDLOT_NETNS_NFDS; i++)
		r->fds[i] = -1;
	r->nft = NULL;
	int saved;
	if (sandlot__netns_new(&r->ns_fd, &saved, err) < 0)
		return -1;
	sandlot__netns_leave(&saved);
	if (egress && sandlot__netns_egress(r->ns_fd, 1, r->fds, &r->nft, err) < 0) {
		sandlot__netns_ready_close(r);
		return -1;
	}
	return 0;
}

void sandlot__netns_ready_close(struct sandlot_netns_ready *r)
{
	for (int i = 0; i < SANDLOT_NETNS_NFDS; i++) {
		if (r->fds[i] >= 0)
			close(r->fds[i]);
		r->fds[i] = -1;
	}
	sandlot__nft_free(r->nft);
	r->nft = NULL;
	if (r->ns_fd >= 0)
		close(r->ns_fd);
	r->ns_fd = -1;
}

#define NETNS_POOL_MAX 16
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sandlot_netns_ready pool[2][NETNS_POOL_MAX]; /* [egress] */
static unsigned pool_n[2], pool_want[2];

void sandlot__netns_pool_want(unsigned plain, unsigned egress)
{
	struct sandlot_netns_ready drop[2 * NETNS_POOL_MAX];
	unsigned ndrop = 0;
	pthread_mutex_lock(&pool_lock);
	pool_want[0] = plain < NETNS_POOL_MAX ? plain : NETNS_POOL_MAX;
	pool_want[1] = egress < NETNS_POOL_MAX ? egress : NETNS_POOL_MAX;
	for (int k = 0; k < 2; k++)
		while (pool_n[k] > pool_want[k])
			drop[ndrop++] = pool[k][--pool_n[k]];
	pthread_mutex_unlock(&pool_lock);
	for (unsigned i = 0; i < ndrop; i++) /* slow (RCU): not under the lock */
		sandlot__netns_ready_close(&drop[i]);
}

void sandlot__netns_pool_fill(void)
{
	for (;;) {
		pthread_mutex_lock(&pool_lock);
		int k = pool_n[0] < pool_want[0] ? 0 : pool_n[1] < pool_want[1] ? 1 : -1;
		pthread_mutex_unlock(&pool_lock);
		if (k < 0)
			return;
		struct sandlot_netns_ready r;
		if (sandlot__netns_make(k, &r, NULL) < 0)
			return; /* creates make their own, and say why if they cannot */
		pthread_mutex_lock(&pool_lock);
		int keep = pool_n[k] < pool_want[k];
		if (keep)
			pool[k][pool_n[k]++] = r;
		pthread_mutex_unlock(&pool_lock);
		if (!keep)
			sandlot__netns_ready_close(&r);
	}
}

int sandlot__netns_pool_take(int egress, struct sandlot_netns_ready *out)
{
	int k = egress ? 1 : 0, got = 0;
	pthread_mutex_lock(&pool_lock);
	if (pool_n[k] > 0) {
		*out = pool[k][--pool_n[k]];
		got = 1;
	}
	pthread_mutex_unlock(&pool_lock);
	return got ? 0 : -1;
}
