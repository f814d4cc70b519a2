/* The network of a vm sandbox (docs/vm.md, "Network"): the same network
 * namespace and egress rules as an ns sandbox's, with QEMU's user-mode
 * network (libslirp) as the guest's only way out of the VM.
 *
 * The host makes the sandbox's network namespace as for ns (loopback only,
 * owned by the initial user namespace: nothing in the jail may change its
 * rules), and QEMU's jail joins it before QEMU runs.  The guest has one
 * virtio-net NIC whose other end is slirp, inside QEMU: every TCP
 * connection or UDP datagram the guest sends out becomes a socket of
 * QEMU's own, in that namespace, and meets exactly what an ns sandbox's
 * process would meet there:
 *
 *   guest connect(203.0.113.9:443) -> slirp connect(203.0.113.9:443) in
 *   the namespace -> nftables redirect to the egress proxy's listener
 *   (sandlot__netns_egress) -> policy, SNI/Host, pins -> the host connects
 *   out.  DNS: the guest's resolver is slirp's 10.0.2.3, which slirp sends
 *   to the nameserver of QEMU's /etc/resolv.conf; the jail has none, so
 *   slirp falls back to 127.0.0.1:53 of the namespace: the DNS listener.
 *   UDP, ICMP: dropped by the same rules.  Without a network the namespace
 *   has loopback only: slirp's connects fail at once and the guest sees
 *   them refused or unreachable; DNS to 127.0.0.1:53 finds nothing and is
 *   refused.
 *
 * slirp's own addresses (10.0.2.2, the "host") lead to the namespace's
 * loopback, where only sandlot's listeners and the relay forward below
 * listen: the guest reaches nothing of the host's through them.
 *
 * Ports (sandlot_port_connect): slirp forwards 127.0.0.1:VM_NET_FWD_PORT
 * of the namespace to the guest's relay port, where sandlot-init's relay
 * (src/init/vm-relay.c) listens.  The host connects there from a thread
 * in the namespace (nsconnect.h), sends the port it wants as two bytes
 * (network order), and the relay answers one byte: 0 once it is connected
 * to that port on the guest's own loopback (127.0.0.1, then [::1]), else
 * the errno of the failure (ECONNREFUSED: nothing listens), and then
 * relays bytes both ways.  So servers bound to the guest's 127.0.0.1 are
 * reachable, as they are in an ns sandbox.
 */
#include "backend/vm.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "core/internal.h"
#include "linux/netns.h"
#include "linux/nsconnect.h"

/* slirp's default network, spelled out so that the guest's CONFIG and
 * QEMU's arguments agree. */
#define VM_NET_GUEST 0x0a00020fu   /* 10.0.2.15 */
#define VM_NET_PREFIX 24
#define VM_NET_GATEWAY 0x0a000202u /* 10.0.2.2 */
#define VM_NET_DNS 0x0a000203u     /* 10.0.2.3 */
/* The guest's relay port: below 1024, which the sandbox user (uid 1000,
 * no capabilities) cannot bind in the guest, and bound before any command
 * runs. */
#define VM_NET_RELAY_PORT 1
/* Where slirp forwards it from, on the namespace's loopback: 1024 or
 * above, because QEMU runs unprivileged in a namespace it does not own. */
#define VM_NET_FWD_PORT 1024

void sandlot__vm_net_init(struct sandlot_vm_net *n)
{
	n->ns_fd = -1;
}

int sandlot__vm_net_create(struct sandlot_vm_net *n, sandlot_error_t **err)
{
	struct sandlot_netns_ready r;
	if (sandlot__netns_make(0, &r, err) < 0)
		return sandlot__error_wrap(err, "make the VM's network namespace");
	n->ns_fd = r.ns_fd;
	return 0;
}

void sandlot__vm_net_release(struct sandlot_vm_net *n)
{
	if (n->ns_fd >= 0)
		close(n->ns_fd);
	n->ns_fd = -1;
}

void sandlot__vm_net_config(struct sandlot_init_config *ic)
{
	ic->net_addr = VM_NET_GUEST;
	ic->net_prefix = VM_NET_PREFIX;
	ic->net_gateway = VM_NET_GATEWAY;
	ic->net_dns = VM_NET_DNS;
	ic->net_relay = VM_NET_RELAY_PORT;
}

void sandlot__vm_net_netdev(char *out, size_t n)
{
	/* IPv4 only (as ns sandboxes: no IPv6 route); no TFTP, SMB or boot
	 * file (none given); the relay forward on the namespace's loopback. */
	snprintf(out, n,
		 "user,id=net,ipv6=off,net=10.0.2.0/%d,host=10.0.2.2,dns=10.0.2.3,"
		 "dhcpstart=10.0.2.15,hostfwd=tcp:127.0.0.1:%d-10.0.2.15:%d",
		 VM_NET_PREFIX, VM_NET_FWD_PORT, VM_NET_RELAY_PORT);
}

/* Read exactly n bytes before the deadline: 0, or -1 with errno (EPIPE at
 * EOF, ETIMEDOUT). */
static int read_full(int fd, void *buf, size_t n, uint64_t deadline)
{
	size_t got = 0;
	while (got < n) {
		int64_t left = (int64_t)(deadline - sandlot__now_ms());
		if (left <= 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int r = poll(&p, 1, (int)left);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			continue;
		ssize_t k = read(fd, (char *)buf + got, n - got);
		if (k < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (k < 0)
			return -1;
		if (k == 0) {
			errno = EPIPE;
			return -1;
		}
		got += (size_t)k;
	}
	return 0;
}

int sandlot__vm_net_port_connect(const struct sandlot_vm_net *n, uint16_t port,
				 unsigned timeout_ms, sandlot_error_t **err)
{
	if (n->ns_fd < 0)
		return sandlot__error(err, EPIPE, "the sandbox is gone");
	uint64_t deadline = sandlot__now_ms() + timeout_ms;
	sandlot_error_t *e = NULL;
	cleanup_close int fd = sandlot__netns_connect_loopback(n->ns_fd, VM_NET_FWD_PORT,
							       (int)timeout_ms, &e);
	if (fd < 0) {
		int st = sandlot_error_status(e);
		sandlot_error_free(e);
		return sandlot__error(err, st == ECONNREFUSED ? EPIPE : st,
				      "connect to port %u inside the sandbox: the VM's port forward "
				      "is not there (QEMU gone?)", (unsigned)port);
	}
	uint8_t req[2] = { (uint8_t)(port >> 8), (uint8_t)port };
	if (sandlot__write_all(fd, req, sizeof(req)) < 0)
		return sandlot__error_errno(err, errno, "connect to port %u inside the sandbox",
					    (unsigned)port);
	uint8_t status;
	if (read_full(fd, &status, 1, deadline) < 0) {
		int rc = errno;
		if (rc == ETIMEDOUT)
			return sandlot__error(err, ETIMEDOUT,
					      "port %u inside the sandbox did not accept the "
					      "connection within %u ms", (unsigned)port, timeout_ms);
		/* EOF: slirp accepted, but nothing listens on the guest's
		 * relay port (the guest is not up, or its init is gone). */
		return sandlot__error(err, rc == EPIPE ? ECONNRESET : rc,
				      "connect to port %u inside the sandbox: the guest's relay "
				      "did not answer", (unsigned)port);
	}
	if (status == ECONNREFUSED)
		return sandlot__error(err, ECONNREFUSED,
				      "nothing is listening on port %u inside the sandbox (connection "
				      "refused on 127.0.0.1 and [::1])", (unsigned)port);
	if (status == ETIMEDOUT)
		return sandlot__error(err, ETIMEDOUT,
				      "port %u inside the sandbox did not accept the connection within "
				      "%u ms", (unsigned)port, timeout_ms);
	if (status != 0)
		return sandlot__error_errno(err, status, "connect to port %u inside the sandbox",
					    (unsigned)port);
	return steal_fd(&fd);
}
