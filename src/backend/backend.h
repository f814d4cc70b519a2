/* Sandbox backends behind one function table, chosen once per sandbox.
 *
 * A backend starts a sandbox whose PID 1 is sandlot-init and hands back a
 * connected byte stream to it; everything above (exec, files, changes)
 * speaks spec/protocol.md over that stream and does not care whether the
 * other end is a namespace sandbox or a microVM.
 */
#ifndef SANDLOT_BACKEND_H
#define SANDLOT_BACKEND_H

#include "sandlot.h"
#include "common/error.h"

struct sandlot;

struct sandlot_backend_ops {
	const char *name;
	/* Start the sandbox described by sb->opts.  On success sets sb->conn_fd
	 * (the protocol stream) and sb->backend (private state); on failure
	 * leaves nothing behind. */
	int (*start)(struct sandlot *sb, sandlot_error_t **err);
	/* Kill every process of the sandbox and wait until they are gone (the
	 * connection then reads EOF).  Never fails; idempotent. */
	void (*kill)(struct sandlot *sb);
	/* Release everything else (cgroup, storage, uid range) and the private
	 * state.  Called after kill and after the connection was shut down, so
	 * nothing uses the backend any more.  Never fails. */
	void (*release)(struct sandlot *sb);
	int (*usage)(struct sandlot *sb, sandlot_usage_t *out, sandlot_error_t **err);
	/* Just the OOM-kill and refused-fork counters (read around every exec,
	 * so cheaper than usage).  0, or -1 when they cannot be read. */
	int (*events)(struct sandlot *sb, uint64_t *oom_kills, uint64_t *pids_limit_hits);
	pid_t (*init_pid)(const struct sandlot *sb);
	/* Open a TCP connection to `port` on the sandbox's own loopback, as
	 * sandlot_port_connect() describes (port and liveness already checked).
	 * The ns backend makes the socket in the sandbox's network namespace;
	 * a VM backend would ask init over its channel and hand back one end
	 * of a relayed pair.  Returns the socket or -1 with err. */
	int (*port_connect)(struct sandlot *sb, uint16_t port, unsigned timeout_ms,
			    sandlot_error_t **err);
	/* The sandbox's network namespace (owned by the backend, open while
	 * the sandbox is), or -1. */
	int (*netns_fd)(const struct sandlot *sb);
};

extern const struct sandlot_backend_ops sandlot__backend_ns;

/* The backend for an image ("host" or a built image → ns).  NULL + error
 * if there is none for it. */
const struct sandlot_backend_ops *sandlot__backend_for(const char *image, sandlot_error_t **err);

#endif
