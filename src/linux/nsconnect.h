/* TCP connections into a sandbox's network namespace, made from the host.
 *
 * A socket belongs to the network namespace of the thread that created it,
 * for its whole life; connect(), read() and write() on it may then happen
 * on any thread.  So only socket() needs to run inside the namespace, and
 * it does, on a short-lived thread of its own that enters the namespace
 * with setns() and ends right after: no other code of the calling process
 * ever runs in a sandbox's namespace, and the calling thread never leaves
 * its own.
 */
#ifndef SANDLOT_LINUX_NSCONNECT_H
#define SANDLOT_LINUX_NSCONNECT_H

#include <stdint.h>

#include "common/error.h"

/* A socket(family, type | SOCK_CLOEXEC, 0) created in the network namespace
 * that ns_fd refers to: a /proc/PID/ns/net descriptor, or (Linux 5.8+) a
 * pidfd of a process in it.  Returns the socket, or -1 with err (EINVAL
 * when ns_fd is a pidfd and the kernel cannot setns() through one). */
int sandlot__netns_socket(int ns_fd, int family, int type, sandlot_error_t **err);

/* Connect to TCP `port` on the namespace's loopback interface: 127.0.0.1,
 * then [::1] if that is refused (a server bound to ::1 only, as some
 * development servers are when "localhost" means ::1), waiting up to
 * timeout_ms for each.  Returns the connected socket (blocking, O_CLOEXEC),
 * or -1 with err: ECONNREFUSED when nothing listens on the port, ETIMEDOUT
 * when nothing answered in time (a full accept queue), or what
 * setns()/socket() failed with. */
int sandlot__netns_connect_loopback(int ns_fd, uint16_t port, int timeout_ms,
				    sandlot_error_t **err);

#endif
