/* Sandbox backends behind one function table, chosen once per sandbox.
 *
 * A backend starts a sandbox whose PID 1 is sandlot-init and hands back a
 * connected byte stream to it; everything above (exec, files, changes)
 * speaks spec/protocol.md over that stream and does not care whether the
 * other end is a namespace sandbox or a microVM.  What the sandbox's kernel
 * counts (OOM kills, forks refused by the pids limit) init reports in each
 * command's EXIT: a backend gives its init the means to read them (ns: its
 * cgroup's event files, init.h fds 10 and 11), core never polls them.
 *
 * What a sandbox runs on is its backend's to attach.  Core resolves a built
 * image and holds it in use (sb->img: digest, in-use lock, its config) and
 * names the workspace (sb->opts.workspace, .storage, .disk_bytes); start
 * attaches both its own way and keeps the workspace exclusive for as long
 * as the sandbox may touch it.  The ns backend attaches the image as a
 * detached read-only mount (ns-image.c) and the workspace as below; a VM
 * backend would attach a read-only disk image and a disk image.  Pause,
 * resume, snapshots and kept workspaces by name are ops too (the end of
 * the table).
 *
 * The ns backend's workspace (/home/user and /tmp) comes from
 * src/linux/storage.h, in three calls it makes in start, and one in
 * release:
 *   sandlot__storage_create()   admits and prepares it (quota reserved in
 *                               the data dir's storage pool, or tmpfs) and
 *                               hands back a detached mount (mount_fd) and
 *                               the workspace's lock (lock_fd);
 *   sandlot__storage_idmap()    once the sandbox's user namespace exists:
 *                               the mount shows the workspace's sandbox uids
 *                               as the sandbox's host uids;
 *   sandlot__storage_release()  once the sandbox has attached the mount;
 *   sandlot__storage_destroy()  in release, after every process of the
 *                               sandbox is gone: the lock is dropped and an
 *                               ephemeral workspace deleted.
 * The backend must keep lock_fd open for as long as any process of the
 * sandbox may touch the workspace (ns passes it to init, which holds it
 * until it dies), so that nothing deletes or reuses a workspace in use.
 */
#ifndef SANDLOT_BACKEND_H
#define SANDLOT_BACKEND_H

#include "sandlot.h"
#include "common/error.h"

struct sandlot_nft;

struct sandlot;
struct sandlot_pool_info;

struct sandlot_backend_ops {
	const char *name;
	/* Start the sandbox described by sb->opts.  On success sets sb->conn_fd
	 * (the protocol stream) and sb->backend (private state); on failure
	 * leaves nothing behind.  The sandbox may still be setting itself up
	 * when this returns: the caller opens the connection meanwhile (so
	 * nothing waits on the other), sends init its CONFIG (without waiting
	 * for HELLO), then calls ready.  Core fills sb->init_cfg (what CONFIG
	 * says: core/internal.h) before start with what every init gets
	 * (limits, names, the seccomp program); start adds what only the
	 * backend knows: FLAGS (SL_CONFIG_TMPFS with disk, SL_CONFIG_IMAGE)
	 * and fsize.  How init gets the rest (the workspace, the image) is the
	 * backend's own business (ns: descriptors, src/init/init.h). */
	int (*start)(struct sandlot *sb, sandlot_error_t **err);
	/* Called once init answered CONFIG (or did not: it died, or refused
	 * its configuration, or timed out): wait for the backend's own side of
	 * the set-up and release what only the set-up needed.  An error here
	 * (the backend knows why init never answered) takes precedence over
	 * the connection's.  On failure the caller kills and releases the
	 * sandbox. */
	int (*ready)(struct sandlot *sb, sandlot_error_t **err);
	/* Kill every process of the sandbox and wait until they are gone (the
	 * connection then reads EOF).  Never fails; idempotent. */
	void (*kill)(struct sandlot *sb);
	/* Start killing every process of the sandbox and return at once
	 * (kill waits; release reaps).  Safe from any thread while other calls
	 * use sb, though not concurrently with kill, detach or release.
	 * Idempotent; never fails. */
	void (*stop)(struct sandlot *sb);
	/* 1 when the sandbox ended by itself or was stopped: its PID 1 is gone
	 * (nothing is reaped: release does that), 0 while it runs.  Thread
	 * safety as for stop. */
	int (*ended)(const struct sandlot *sb);
	/* Start killing the sandbox and hand the rest of its teardown to a
	 * helper process without waiting (sandlot_destroy_nowait()); release
	 * then only frees this process's state.  -1 (nothing done) when the
	 * sandbox has no helper.  NULL: the backend has none. */
	int (*detach)(struct sandlot *sb);
	/* Release everything else (cgroup, storage, uid range) and the private
	 * state.  Called after kill (or detach) and after the connection was
	 * shut down, so nothing uses the backend any more.  Never fails. */
	void (*release)(struct sandlot *sb);
	int (*usage)(struct sandlot *sb, sandlot_usage_t *out, sandlot_error_t **err);
	pid_t (*init_pid)(const struct sandlot *sb);
	/* sandlot_prepare() and sandlot_new_id() for this backend (opts are
	 * validated, defaults not yet applied). */
	int (*prepare)(const sandlot_options_t *likely, unsigned count, sandlot_error_t **err);
	void (*new_id)(const sandlot_options_t *opts, char id[32]);
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
	/* Remove what a sandbox with this (valid) id left on the host after
	 * its owner lost it (killed, or a release the kernel was slow to let
	 * finish): with kill, kill whatever of it still runs first.  Returns
	 * how many of its parts remain (the host is still finishing with
	 * them: call again later), 0 when none does.  Only for ids the caller
	 * knows to be its own.  NULL: the backend leaves nothing behind. */
	unsigned (*remove_leftovers)(const char *id, int kill);
	/* Hand over egress set up ahead in that namespace (what
	 * sandlot__netns_egress(redirect = 1) makes: listeners into fds, the
	 * rules' context into *nft) and return 1, or 0 when there is none.
	 * Optional. */
	int (*take_egress)(struct sandlot *sb, int fds[3], struct sandlot_nft **nft);
	/* How long sandlot_create() waits for init's HELLO before it calls
	 * ready with the sandbox not ready (ready then says why); 0: 10 s.
	 * A VM that boots a kernel under emulation needs longer. */
	unsigned ready_timeout_ms;

	/* ---- pause, resume and snapshots (sandlot_pause(), sandlot_resume(),
	 * sandlot_workspace_copy()).  A paused sandbox is what its backend
	 * kept under the name of its kept workspace (sb->opts.workspace): the
	 * files of /home/user and /tmp always, the running state where the
	 * backend can save it.  NULL where a backend has none of this: the
	 * calls fail with ENOTSUP naming the backend. ---- */
	/* Pause the running sandbox sb (it has a kept workspace; flags are
	 * SANDLOT_PAUSE_*, checked against the known ones): keep what resume
	 * needs under sb->opts.workspace, durably, and end the sandbox's
	 * processes (the connection then reads EOF), without reaping or
	 * releasing anything: the caller destroys sb afterwards.  Safe while
	 * other calls use sb (as stop).  -1 with ENOTSUP or EINVAL for flags
	 * the backend cannot honour, with the sandbox untouched; any other
	 * failure leaves it ended, its files kept as far as they reached the
	 * disk. */
	int (*pause)(struct sandlot *sb, unsigned flags, sandlot_error_t **err);
	/* start, on what pause kept for sb->opts.workspace (never NULL here):
	 * ENOENT when nothing of that name exists (a resume never starts on a
	 * fresh workspace), EBUSY while another sandbox uses it. */
	int (*resume)(struct sandlot *sb, sandlot_error_t **err);
	/* Copy what is kept under `src` (a paused or ended sandbox's) to the
	 * new name `dst`, admitted like a new workspace of src's size: EEXIST
	 * if dst exists, EBUSY while a sandbox uses src; dst appears complete
	 * or not at all. */
	int (*snapshot)(const char *data_dir, const char *src, const char *dst, double overcommit,
			sandlot_error_t **err);

	/* ---- kept workspaces by name (sandlot_workspace_*), which core asks
	 * each backend about in turn, since a name alone does not say whose it
	 * is.  NULL: the backend keeps none. ---- */
	/* The size (quota) of the kept workspace `name`: ENOENT when this
	 * backend has none of that name. */
	int (*workspace_size)(const char *data_dir, const char *name, uint64_t *bytes,
			      sandlot_error_t **err);
	/* Delete it (and whatever the pause kept with it): ENOENT when this
	 * backend has none of that name, EBUSY while a sandbox uses it. */
	int (*workspace_remove)(const char *data_dir, const char *name, sandlot_error_t **err);
	/* Its names (a NULL-terminated array the caller frees). */
	int (*workspace_list)(const char *data_dir, char ***names, sandlot_error_t **err);
	/* Make all of them durable. */
	int (*workspace_sync)(const char *data_dir, sandlot_error_t **err);

	/* ---- the data directory's storage pool (sandlot_storage_*) and
	 * workspaces as files (sandlot_workspace_import*, _export): the
	 * backend that keeps its workspaces in a pool (ns) has these, and core
	 * asks the first that has them; NULL: the backend keeps its workspaces
	 * otherwise (vm: disk files, docs/vm.md), and calls that name such a
	 * workspace fail with ENOTSUP naming the backend. ---- */
	int (*storage_info)(const char *data_dir, struct sandlot_pool_info *out,
			    sandlot_error_t **err);
	int (*storage_grow)(const char *data_dir, uint64_t bytes, sandlot_error_t **err);
	int (*storage_unmount)(const char *data_dir, sandlot_error_t **err);
	/* A new kept workspace `name` from a workspace image of the former
	 * layout (an ext4 file), from a tar read from fd (admitted at `bytes`),
	 * and a kept one written out as such a tar. */
	int (*workspace_import)(const char *data_dir, const char *name, const char *image,
				double overcommit, sandlot_error_t **err);
	int (*workspace_import_tar)(const char *data_dir, const char *name, uint64_t bytes, int fd,
				    double overcommit, sandlot_error_t **err);
	int (*workspace_export)(const char *data_dir, const char *name, int fd,
				sandlot_error_t **err);
};

extern const struct sandlot_backend_ops sandlot__backend_ns;
extern const struct sandlot_backend_ops sandlot__backend_vm;

/* Every backend, NULL-terminated (for calls that only know a sandbox's id,
 * as sandlot__remove_leftovers()). */
extern const struct sandlot_backend_ops *const sandlot__backends[];

/* The backend for opts (its isolation: ns or vm).  NULL + EINVAL if
 * there is none for it. */
const struct sandlot_backend_ops *sandlot__backend_for(const sandlot_options_t *opts,
						       sandlot_error_t **err);

#endif
