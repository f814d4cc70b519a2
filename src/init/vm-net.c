/* A microVM guest's network (the vm backend, docs/vm.md "Network"), from
 * CONFIG's NET_* records: the NIC (virtio-net, whose other end is QEMU's
 * user-mode network inside the sandbox's network namespace on the host)
 * gets its address and a default route through the gateway, and
 * /etc/resolv.conf names the resolver (setup.c writes it).  Whether
 * anything gets out is decided on the host, by the namespace's egress
 * rules: the guest's routes only lead there.
 *
 * And the port relay, sandlot_port_connect()'s guest side: a process that
 * listens on NET_RELAY of the guest's address (a port below 1024, bound
 * before any command runs, so the sandbox user cannot take it), reads the
 * port the host wants (two bytes, network order), connects to it on the
 * guest's loopback (127.0.0.1, then [::1] when refused), answers one byte
 * (0, or the errno of the failure) and relays both ways until both sides
 * are done.  One process per connection, forked from the relay; they run
 * as nobody.
 */
#include "init.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/netlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/rtnl.h"
#include "linux/syscalls.h"

#define NOBODY 65534
/* How long a relay connection may take to name its port and to connect. */
#define RELAY_SETUP_S 10

static int fail(char *why, size_t len, const char *what)
{
	int e = errno ? errno : EIO;
	snprintf(why, len, "%s: %s", what, init__strerror(e));
	return e;
}

/* The NIC: the one interface that is not loopback. */
static int find_nic(char name[IF_NAMESIZE])
{
	cleanup_closedir DIR *d = opendir("/sys/class/net");
	if (!d)
		return -1;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.' || strcmp(e->d_name, "lo") == 0 ||
		    strlen(e->d_name) >= IF_NAMESIZE)
			continue;
		snprintf(name, IF_NAMESIZE, "%s", e->d_name);
		return 0;
	}
	errno = ENODEV;
	return -1;
}

static int nic_up(const struct init_config *cfg, char *why, size_t len)
{
	char name[IF_NAMESIZE];
	if (find_nic(name) < 0)
		return fail(why, len, "find the VM's network interface (virtio-net)");
	cleanup_close int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		return fail(why, len, "read the network interface's flags");
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		return fail(why, len, "bring the network interface up");
	int index = (int)if_nametoindex(name);
	cleanup_close int nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (index <= 0 || nl < 0)
		return fail(why, len, "netlink");
	if (sandlot__rtnl_add_addr(nl, index, cfg->net_addr, cfg->net_prefix) < 0)
		return fail(why, len, "give the network interface its address");
	if (sandlot__rtnl_add_default_route(nl, index, cfg->net_gateway, 0) < 0)
		return fail(why, len, "add the default route");
	return 0;
}

/* ---- the relay -------------------------------------------------------------------- */

static int write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n > 0) {
		ssize_t k = write(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

static int connect_local(uint16_t port)
{
	struct sockaddr_in v4 = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sockaddr_in6 v6 = { .sin6_family = AF_INET6, .sin6_port = htons(port),
				   .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	struct timeval tv = { RELAY_SETUP_S, 0 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	/* A full accept queue: connect gives up with EINPROGRESS... as a
	 * timeout (SO_SNDTIMEO bounds a blocking connect). */
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&v4, sizeof(v4)) == 0)
		return fd;
	int e = errno;
	close(fd);
	if (e == ECONNREFUSED) {
		fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd >= 0) {
			setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
			if (connect(fd, (struct sockaddr *)&v6, sizeof(v6)) == 0)
				return fd;
			close(fd);
		}
	}
	errno = e == EINPROGRESS || e == EAGAIN ? ETIMEDOUT : e;
	return -1;
}

/* Copy both ways until both directions ended (a half-close is passed on). */
static void splice_both(int a, int b)
{
	int fd[2] = { a, b };
	int open_dir[2] = { 1, 1 }; /* [0]: a -> b, [1]: b -> a */
	char buf[65536];
	while (open_dir[0] || open_dir[1]) {
		struct pollfd p[2];
		int n = 0, which[2];
		for (int d = 0; d < 2; d++)
			if (open_dir[d]) {
				p[n] = (struct pollfd){ .fd = fd[d], .events = POLLIN };
				which[n++] = d;
			}
		if (poll(p, (nfds_t)n, -1) < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		for (int i = 0; i < n; i++) {
			if (!p[i].revents)
				continue;
			int d = which[i];
			ssize_t k = read(fd[d], buf, sizeof(buf));
			if (k < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (k <= 0 || write_all(fd[!d], buf, (size_t)k) < 0) {
				if (k < 0)
					return; /* reset: both go */
				shutdown(fd[!d], SHUT_WR);
				open_dir[d] = 0;
				if (k > 0)
					return; /* the other side is gone */
			}
		}
	}
}

static __attribute__((noreturn)) void relay_one(int c)
{
	struct timeval tv = { RELAY_SETUP_S, 0 };
	setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	uint8_t req[2];
	size_t got = 0;
	while (got < 2) {
		ssize_t k = read(c, req + got, 2 - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			_exit(0);
		got += (size_t)k;
	}
	tv.tv_sec = 0;
	setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	uint16_t port = (uint16_t)(req[0] << 8 | req[1]);
	int up = port ? connect_local(port) : (errno = EINVAL, -1);
	uint8_t status = up >= 0 ? 0 : (uint8_t)(errno > 0 && errno < 256 ? errno : EIO);
	if (write_all(c, &status, 1) < 0 || up < 0)
		_exit(0);
	int one = 1;
	setsockopt(up, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	splice_both(c, up);
	_exit(0);
}

static __attribute__((noreturn)) void relay_main(int lfd)
{
	/* Children are reaped by the kernel (SIG_IGN), and none of init's
	 * descriptors but the listener stay: not the control port. */
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	sigaction(SIGCHLD, &sa, NULL);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (lfd != 3 && (dup2(lfd, 3) < 0 || close(lfd) < 0))
		_exit(1);
	sys_close_range_flags(4, ~0U, 0);
	if (setgroups(0, NULL) < 0 || setresgid(NOBODY, NOBODY, NOBODY) < 0 ||
	    setresuid(NOBODY, NOBODY, NOBODY) < 0)
		_exit(1);
	for (;;) {
		int c = accept4(3, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE ||
			    errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
				continue;
			_exit(1);
		}
		pid_t pid = fork();
		if (pid == 0) {
			close(3);
			relay_one(c);
		}
		close(c);
	}
}

static int relay_start(const struct init_config *cfg, char *why, size_t len)
{
	cleanup_close int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		return fail(why, len, "the port relay's socket");
	int one = 1;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->net_relay),
				 .sin_addr.s_addr = htonl(cfg->net_addr) };
	if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 64) < 0)
		return fail(why, len, "listen for the port relay");
	pid_t pid = fork();
	if (pid < 0)
		return fail(why, len, "fork the port relay");
	if (pid == 0)
		relay_main(lfd);
	return 0; /* reaped as an unknown child if it ever ends */
}

int init_vm_net(const struct init_config *cfg, char *why, size_t len)
{
	if (!cfg->net_addr)
		return 0;
	int e = nic_up(cfg, why, len);
	if (e)
		return e;
	return cfg->net_relay ? relay_start(cfg, why, len) : 0;
}
