/* Internals of the `ns` backend shared by ns.c (start, kill, release) and
 * ns-helper.c (the cleanup helper). */
#ifndef SANDLOT_BACKEND_NS_H
#define SANDLOT_BACKEND_NS_H

#include <sys/types.h>

#include "sandlot.h"
#include "common/error.h"
#include "linux/cgroup.h"
#include "linux/netns.h"
#include "linux/storage.h"
#include "linux/userns.h"

/* Everything the host holds for one sandbox.  Released by ns.c's release
 * in the creating process or — after a detach — by the cleanup helper,
 * which owns a copy of it (it is a fork of the creating process). */
struct ns_state {
	pid_t pid;                  /* init, a child of the creating process */
	int pidfd;
	struct sandlot_uid_slot slot;
	sandlot_cgroup_t *cg;
	struct sandlot_storage storage;
	int image_fd;               /* a built image's detached mount until init attached it, or -1 */
	/* The cleanup helper (sandlot_options_t.cleanup_helper), or 0. */
	pid_t helper_pid;
	int helper_fd;              /* the helper's lifeline: our write end, -1 if none */
	int cleanup_lock_fd;        /* shared flock on <data_dir>/cleanup.lock, or -1 */
	int status_fd;              /* init's set-up report, until ready() read it */
	int detached;               /* the helper owns the teardown: release only frees */
	int netns_fd;               /* the network namespace the host made for it, or -1 */
	/* Taken from the stock made ahead with egress set up in it: its
	 * listeners and rules context, until the core takes them
	 * (backend op take_egress); else -1 / NULL. */
	int egress_fds[SANDLOT_NETNS_NFDS];
	struct sandlot_nft *egress_nft;
	/* A spare namespace taken for it (netns.h): its mount point's name
	 * until put back, else "". */
	char spare_netns[SANDLOT_NETNS_SPARE_NAME];
	const char *data_dir;       /* the sandbox's (for the spare), owned by it */
	struct sandlot_cgroup_limits cg_lim; /* its cgroup's, for the next run's spare */
};

/* Remove cgroups and workspaces that a killed sandlot process left, and the
 * free prepared cgroups of preparers that are gone, at most once a minute
 * per data directory (ns.c). */
void sandlot__ns_collect_stale(const char *data_dir);

/* ---- a built image (ns-image.c) ---- */

/* A detached, recursive, read-only (nosuid, nodev) clone of the image's
 * rootfs (images/<digest>/rootfs), to be attached by the sandbox's init:
 * the descriptor, or -1 with an error. */
int sandlot__ns_image_mount(const char *data_dir, const char *digest, sandlot_error_t **err);

/* Show the image's owners through the user namespace of `pid` (on-disk
 * uid u appears as sandbox uid u, so root's files belong to root inside
 * instead of to the overflow uid).  Where the filesystem holding the data
 * directory cannot be idmapped this is skipped: files then appear owned by
 * nobody, which changes nothing for reading and executing them. */
void sandlot__ns_image_idmap(int fd, pid_t pid);

/* ---- the prepared root tree (ns-root.c) ---- */

/* What a root tree depends on. */
struct ns_root_key {
	const char *rootfs;     /* a built image's rootfs directory, or NULL: the host's */
	const char *hostname;
	const char *user_name;  /* login name of the sandbox user (uid 1000) */
};

/* A detached clone of the prepared root tree, for one sandbox. */
struct ns_root {
	int fd;                 /* -1: none (init builds the root itself) */
	char *idmap[64];        /* paths in it to idmap through the sandbox's user namespace */
	size_t nidmap;
};

/* Clone the prepared root tree for `k` into out (out->fd), preparing it
 * first (with may_build) if this process has none for k yet or the host's
 * /etc changed since.  Thread-safe.  0, or -1 with an error (out->fd is
 * -1): none prepared and !may_build (ENOENT), the kernel cannot build
 * such trees, or a bind failed. */
int sandlot__ns_root_clone(const struct ns_root_key *k, struct ns_root *out, int may_build,
			   sandlot_error_t **err);

/* Idmap the clone's own parts through the user namespace of `pid` (its
 * maps written), before anything attaches it.  Best effort. */
void sandlot__ns_root_idmap(struct ns_root *r, pid_t pid);

/* Close the clone (after handing it to init) and free. */
void sandlot__ns_root_release(struct ns_root *r);

/* This process's templates (at most max of their fds into fds[]): a
 * process that is about to exit hands them to one that lives on, so that
 * unmounting them (an RCU grace period) is not part of its exit.  The
 * count. */
size_t sandlot__ns_root_templates(int *fds, size_t max);

/* ---- prepared resources (ns-prepare.c) ---- */

/* sandlot_prepare() and sandlot_new_id() (effective options). */
int sandlot__ns_prepare(const sandlot_options_t *likely, unsigned count, sandlot_error_t **err);
void sandlot__ns_new_id(const sandlot_options_t *opts, char id[32]);
/* A sandbox took a prepared cgroup: wake the preparing thread, if any. */
void sandlot__ns_prepare_taken(void);

/* Open <data_dir>/cleanup.lock and take a shared flock on it (see
 * sandlot_options_t.cleanup_helper).  The fd, or -1 with an error. */
int sandlot__ns_cleanup_lock(const char *data_dir, sandlot_error_t **err);

/* Fork the cleanup helper of `ns`: a process of its own (own session,
 * stdio on /dev/null, every descriptor closed but the ones it needs:
 * init's pidfd, the uid slot lock, the workspace lock and the cleanup
 * lock), shown as
 * "sandlot-cleanup ID" by ps, that waits on a lifeline pipe.  EOF on
 * the pipe — this process exited, was killed, or detached the sandbox —
 * makes it kill init, wait until every process of the sandbox is gone and
 * delete the workspace and release the cgroup, the uid range and the
 * locks; then it runs the stale collector.  A byte instead tells it that this process did the teardown
 * itself, and it just exits.
 *
 * Call it while no other thread of this process holds a lock the helper's
 * code takes (a single-threaded caller is safe; libc's malloc is
 * fork-safe).  Sets ns->helper_pid and ns->helper_fd; 0, or -1 with an
 * error (nothing started). */
int sandlot__ns_helper_start(struct ns_state *ns, const char *id, const char *data_dir,
			     sandlot_error_t **err);

/* Tell the helper that the teardown is done and reap it.  No-op without a
 * helper. */
void sandlot__ns_helper_stop(struct ns_state *ns);

/* Hand the teardown to the helper: close the lifeline without the byte
 * (the helper is not reaped here: it outlives this call by design).
 * Returns 0, or -1 without a helper. */
int sandlot__ns_helper_detach(struct ns_state *ns);

#endif
