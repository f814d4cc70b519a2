/* libsandlot — create locked-down sandboxes, run commands in them, move files
 * in and out, track what changed, destroy them without a trace.
 *
 * Conventions (written down in docs/errors.md and docs/libsandlot.md):
 *  - Every fallible call takes `sandlot_error_t **err` last and returns -1 or
 *    NULL on failure, storing an error the caller must free with
 *    sandlot_error_free().  err may be NULL when the caller does not care.
 *  - Handles are opaque.  Strings passed in are copied; strings returned are
 *    owned by the handle they came from unless the comment says otherwise.
 *  - All functions are thread-safe with respect to different sandboxes and,
 *    unless noted, with respect to the same sandbox.  Callbacks run on the
 *    library's I/O thread: they must not block for long.  From a callback
 *    you may call the non-blocking functions (sandlot_exec,
 *    sandlot_proc_kill, sandlot_proc_close_stdin,
 *    sandlot_proc_resume_output, sandlot_alive) but not the blocking ones
 *    (sandlot_proc_wait, sandlot_proc_write_stdin, file calls, changes,
 *    sandlot_destroy, sandlot_proc_free of an unfinished process).
 *  - Handles that belong to a sandbox (processes, readers, writers) stay
 *    valid after sandlot_destroy(): they just fail (EPIPE) or report the
 *    process as killed.  Free them as usual.
 *
 * Versioned structs.  Every struct the caller fills in and passes by
 * pointer (sandlot_options_t, sandlot_exec_spec_t, sandlot_exec_callbacks_t,
 * sandlot_net_policy_t, sandlot_net_config_t, sandlot_packages_t,
 * sandlot_packages_config_t) starts with `size_t size`, which the caller
 * sets to sizeof the struct: sandlot_options_init() does it for options,
 * the others are written e.g.
 *     sandlot_exec_spec_t spec = { .size = sizeof(spec), .argv = argv };
 * New fields are only ever added at the end, and 0 always means "the
 * default", so a program built with an older sandlot.h keeps working with a
 * newer library: the library reads the fields the size covers and takes
 * the rest as 0.  A program built with a newer sandlot.h works with an
 * older library as long as it leaves the newer fields 0.  A size of 0 (the
 * struct was not initialised) or one that matches no version fails with
 * EINVAL and a message saying so.
 *
 * Structs the library fills in grow the same way (docs/libsandlot.md,
 * "Structs the library fills in").  One to fill (sandlot_usage_t,
 * sandlot_storage_info_t, sandlot_net_stats_t, sandlot_install_result_t,
 * sandlot_exit_t, sandlot_changes_t) starts with `size_t size` too, which
 * the caller sets to sizeof before the call:
 *     sandlot_usage_t u = { .size = sizeof(u) };
 * the library writes nothing past it (zeros in the caller's fields it does
 * not know) and sets size to how much it wrote: SANDLOT_HAS(&u, field) says
 * whether a field was filled.  on_exit's status carries the library's size.
 * Arrays (sandlot_list, sandlot_net_log, sandlot_changes_t.items) and
 * sandlot_stat (whose `size` is the file's) are macros that pass sizeof the
 * caller's element to a _sized function, which fills each element as far
 * as the caller's struct goes, zeros past what it knows.
 */
#ifndef SANDLOT_H
#define SANDLOT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SANDLOT_API __attribute__((visibility("default")))

/* Whether the struct *p the library filled (or handed to a callback) covers
 * `field`: its size field reaches past it.  For a field newer than the
 * library: 0 when an older library filled the struct. */
#define SANDLOT_HAS(p, field) \
	((p)->size >= offsetof(__typeof__(*(p)), field) + sizeof((p)->field))

/* ---- errors ------------------------------------------------------------ */

typedef struct sandlot_error sandlot_error_t;

/* errno-style status of the error (> 0), e.g. ENOENT for a missing file,
 * ENOSPC when the sandbox disk is full, EINVAL for a bad argument. */
SANDLOT_API int sandlot_error_status(const sandlot_error_t *err);
/* One-line message, outermost context first.  Owned by err. */
SANDLOT_API const char *sandlot_error_message(const sandlot_error_t *err);
SANDLOT_API void sandlot_error_free(sandlot_error_t *err);

/* ---- sandbox options --------------------------------------------------- */

/* Network (docs/network.md).  Every sandbox has a network namespace of its
 * own that the host, not the sandbox, owns.  With NONE it has loopback
 * only.  Otherwise nothing in it has a route out either: DNS and every TCP
 * connection are redirected to sandlot, which answers DNS itself and
 * connects from the host side when the policy allows the name (TLS SNI,
 * HTTP Host) or the address; other UDP, ICMP and IPv6 fail at once.
 * Private, loopback, link-local (metadata), CGNAT and this host's own
 * addresses stay closed in every mode unless the operator opens a range
 * (sandlot_net_configure). */
typedef enum {
	SANDLOT_NET_NONE = 0,      /* loopback only (the default) */
	SANDLOT_NET_ALLOWLIST = 1, /* the names and IPv4 ranges of `allow`, minus `deny` */
	SANDLOT_NET_OPEN = 2,      /* the public internet, minus `deny` */
} sandlot_network_t;

/* Rules are host names ("pypi.org"), wildcards ("*.pythonhosted.org": the
 * subdomains only, not pythonhosted.org itself) and IPv4 ranges
 * ("203.0.113.0/24", or a single address).  Names are ASCII (the punycode
 * form of an international name).  A deny rule wins over an allow rule.
 * Lists are NULL-terminated, at most 256 entries; NULL means empty. */
typedef struct sandlot_net_policy {
	size_t size;               /* sizeof(this struct): see "Versioned structs" above */
	sandlot_network_t mode;
	const char *const *allow;   /* ALLOWLIST only */
	const char *const *deny;
} sandlot_net_policy_t;

typedef enum {
	/* The pool (unless SANDLOT_STORAGE=tmpfs is set). */
	SANDLOT_STORAGE_DEFAULT = 0,
	/* A directory with a quota of disk_bytes in the data directory's
	 * storage pool (a preallocated btrfs filesystem mounted once): a real
	 * disk quota, kept off memory, admitted against the space there is. */
	SANDLOT_STORAGE_POOL,
	/* tmpfs: files live in memory and count against memory_bytes. */
	SANDLOT_STORAGE_TMPFS,
} sandlot_storage_t;

/* What separates a sandbox from the host.  NS: Linux namespaces, a
 * cgroup and a seccomp filter around sandlot-init (the default).  VM: a
 * QEMU microVM with its own kernel, sandlot-init its PID 1, and QEMU
 * itself jailed (namespaces, its own uid, a cgroup, -sandbox); KVM where
 * /dev/kvm really works, TCG emulation (slow) elsewhere. */
typedef enum {
	SANDLOT_ISOLATION_NS = 0,
	SANDLOT_ISOLATION_VM = 1,
} sandlot_isolation_t;

typedef struct sandlot_options {
	size_t size;                /* sizeof(sandlot_options_t): set by sandlot_options_init() */
	const char *image;          /* "host" (default) */
	uint64_t memory_bytes;      /* memory incl. swap; default 512 MiB */
	uint32_t cpus_milli;        /* CPU quota in thousandths of a CPU; 0 = no quota */
	uint32_t pids;              /* max processes incl. init; default 256 */
	uint64_t disk_bytes;        /* /home/user + /tmp quota; default 1 GiB */
	uint64_t nofile;            /* RLIMIT_NOFILE for commands; default 1024 */
	const char *const *env;     /* extra "K=V" for every command; NULL-terminated */
	const char *hostname;       /* default "sandlot" */
	sandlot_network_t network;
	const char *const *net_allow; /* with SANDLOT_NET_ALLOWLIST (sandlot_net_policy_t.allow) */
	const char *const *net_deny;  /* sandlot_net_policy_t.deny */
	sandlot_storage_t storage;  /* where /home/user and /tmp live */
	const char *data_dir;       /* default $SANDLOT_DATA_DIR or /var/lib/sandlot */
	const char *init_path;      /* default $SANDLOT_INIT or next to the library's user */
	/* A kept workspace: /home/user and /tmp live in the storage pool's
	 * workspace of this name ([a-z0-9][a-z0-9_.-]*, up to 64 characters),
	 * which sandlot never removes by itself, so a later sandbox given the
	 * same name finds the files byte for byte (pause/resume, snapshots).
	 * A missing one is created, disk_bytes big, appearing complete or not
	 * at all; an existing one is used as it is (its quota stays, disk_bytes
	 * is ignored).  Owners are stored as sandbox uids (1000 for the user)
	 * and mapped to the sandbox's host uid range by an idmapped mount, so
	 * any sandbox can use it.  One sandbox at a time: EBUSY while another
	 * has it.  Pool storage only (EINVAL with SANDLOT_STORAGE_TMPFS).
	 * NULL (the default): a workspace that goes with the sandbox. */
	const char *workspace;
	/* How far the quotas of the data directory's workspaces may add up
	 * beyond the storage pool's usable size: 1 (the default, also when 0
	 * and $SANDLOT_DISK_OVERCOMMIT is unset) reserves every quota for real,
	 * so no workspace can find the pool full below its quota; 2 admits
	 * twice the space, and a workspace may then get ENOSPC from a full
	 * pool before its own quota (its writes fail cleanly, nobody's data
	 * is lost).  A create that cannot be admitted fails with ENOSPC. */
	double disk_overcommit;
	/* Give the sandbox this id ("sb-" + 26 of [a-z2-7]) instead of a new
	 * one, e.g. to bring a paused sandbox back under its own id.  The caller
	 * guarantees that no other live sandbox has it.  NULL: a new id. */
	const char *id;
	/* Change tracking (sandlot_changes_scan) is bounded in bytes, since the
	 * sandbox's code chooses the tree it walks.  changes_max_bytes: what one
	 * scan may report, each change counting its path plus 34 bytes (0: 8
	 * MiB, at least 4 KiB); scan_memory_bytes: what the walk inside the
	 * sandbox may hold, where it counts against memory_bytes (0: a
	 * sixteenth of memory_bytes, at most 32 MiB; at least 64 KiB and at
	 * most a quarter of memory_bytes).  Past either, the scan says
	 * truncated. */
	uint64_t changes_max_bytes;
	uint64_t scan_memory_bytes;
	/* 1: a helper process, forked at creation, finishes the sandbox's
	 * teardown — waits for its processes to end, removes its cgroup, gives
	 * back its storage and uid range — when this process dies without
	 * destroying it (even by SIGKILL) and after sandlot_destroy_nowait().
	 * The helper ("sandlot-cleanup") is a fork of the caller: create such
	 * sandboxes while no other thread of the caller holds a lock (a
	 * single-threaded program, like `sandlot run`).  While it works it
	 * holds a shared flock on <data_dir>/cleanup.lock: an exclusive flock
	 * on that file waits for every helper of the data dir to finish. */
	int cleanup_helper;
	/* 1: sandlot_create() returns as soon as the sandbox is started, while
	 * its init still sets itself up (a millisecond or so), so that the
	 * caller's first requests are on their way meanwhile: init serves them
	 * once it is ready.  sandlot_wait_ready() then tells whether the
	 * set-up worked (with its error if not); requests made before a failed
	 * set-up fail as if the sandbox had died (EPIPE, killed). */
	int start_nowait;
	/* The kind of sandbox (docs/vm.md): SANDLOT_ISOLATION_NS (0, the
	 * default) or SANDLOT_ISOLATION_VM, a microVM of its own. */
	sandlot_isolation_t isolation;
} sandlot_options_t;

/* Fill opts with the defaults above and set opts->size: always start
 * from this.  A macro, so that the size is the caller's sizeof; the
 * function writes only that many bytes. */
#define sandlot_options_init(opts) sandlot_options_init_sized((opts), sizeof(*(opts)))
SANDLOT_API void sandlot_options_init_sized(sandlot_options_t *opts, size_t size);

/* Prepare, in a background thread of the library, what sandboxes created
 * with options like `likely` need, so that their creation does less: a
 * set of `count` cgroups (with likely's limits), the root filesystem tree
 * for likely's image and hostname.  The set is refilled as sandboxes take
 * from it; a sandbox with other limits still takes one and rewrites its
 * limits.  Meant for a long-running process (sandlotd); a later call
 * replaces the earlier one.  Count 0 stops preparing: it waits for work
 * under way, removes the prepared cgroups no sandbox has taken and lets go
 * of them (a process that prepared must do it before it exits; if it is
 * killed instead, the next preparer of the data dir, or any sandlot
 * process's stale collector, removes them).  For vm options
 * (SANDLOT_ISOLATION_VM) it saves instead, once, a template VM of likely's
 * machine (image, memory, cpus, disk) in the data dir, which later cold
 * creates of that machine restore instead of booting (docs/vm.md, "Fast
 * creates"); count 0 waits for one under way.  0, or -1 with EINVAL for
 * options that sandlot_options_validate() refuses. */
SANDLOT_API int sandlot_prepare(const sandlot_options_t *likely, unsigned count,
				sandlot_error_t **err);

/* A new sandbox id ("sb-" and 26 of [a-z2-7], 30 bytes with the NUL) for
 * sandlot_options_t.id: the name of resources prepared for a sandbox with
 * these options (sandlot_prepare() of this or another process) when
 * there are some — they are then reserved for the sandbox created with
 * that id by this process — else a fresh one.  For a caller that needs the
 * id before sandlot_create() (to name files after it); without that, leave
 * opts->id NULL and sandlot_create() does the same. */
SANDLOT_API void sandlot_new_id(const sandlot_options_t *opts, char id[32]);

/* Give back an id from sandlot_new_id() that no sandlot_create() will use
 * after all: what was reserved for it is free again for the next sandbox.
 * (sandlot_create() does it itself when it fails.)  Any other id: a no-op. */
SANDLOT_API void sandlot_release_id(const char *id);

/* Check options without creating anything: minimum sizes (16M memory and
 * disk), pids >= 2, KEY=VALUE environment entries, hostname syntax, known
 * image.  EINVAL/ENOENT with a message naming the bad value.
 * sandlot_create() runs the same checks. */
SANDLOT_API int sandlot_options_validate(const sandlot_options_t *opts, sandlot_error_t **err);

/* ---- sandbox lifecycle ------------------------------------------------- */

typedef struct sandlot sandlot_t;

/* Create and start a sandbox: namespaces, cgroup, storage, seccomp policy,
 * sandlot-init running as its PID 1.  Returns a handle the caller must
 * release with sandlot_destroy().  On failure nothing is left behind. */
SANDLOT_API sandlot_t *sandlot_create(const sandlot_options_t *opts, sandlot_error_t **err);

/* Kill every process in the sandbox, release its cgroup, storage and uid
 * range, and free the handle.  Safe to call at any time, including while
 * commands run (they are reported as killed).  Never fails; NULL is a no-op. */
SANDLOT_API void sandlot_destroy(sandlot_t *sb);

/* Wait until the sandbox (created with start_nowait) has finished setting
 * itself up: 0, or -1 with the set-up's error (as sandlot_create() would
 * have failed); the same answer every time.  Immediate for a sandbox
 * created without start_nowait. */
SANDLOT_API int sandlot_wait_ready(sandlot_t *sb, sandlot_error_t **err);

/* For a process about to exit (as `sandlot run` after its command): kill
 * the sandbox and free the handle without waiting for the sandbox to be
 * gone; its cleanup helper (sandlot_options_t.cleanup_helper) removes the
 * rest in the background.  The sandbox's init, a child of the caller, is
 * reaped by whoever reaps the caller's orphans once it exits; a caller that
 * lives on must reap it itself (or use sandlot_destroy()).  Without a
 * helper this is sandlot_destroy().  NULL is a no-op. */
SANDLOT_API void sandlot_destroy_nowait(sandlot_t *sb);

/* Globally unique id ("sb-" followed by 26 lowercase base32 characters). */
SANDLOT_API const char *sandlot_id(const sandlot_t *sb);

/* Set environment variables for the commands started in the sandbox from
 * now on, as opts->env at creation would have: env is "KEY=VALUE" entries,
 * NULL-terminated; each replaces the entry with the same key (default or
 * earlier), the other entries stay.  Commands already running keep the
 * environment they started with.  NULL or an empty list is a no-op.
 * Returns 0, or -1 with EINVAL (an entry without '=' or with an empty key)
 * or ENOMEM; on failure the environment is unchanged.  (sandlotd uses it to
 * give a sandbox made in advance the environment a request asks for.) */
SANDLOT_API int sandlot_set_env(sandlot_t *sb, const char *const *env, sandlot_error_t **err);

/* Whether the sandbox is still usable (its init is alive). */
SANDLOT_API int sandlot_alive(const sandlot_t *sb);

/* ---- pause and resume -------------------------------------------------- */

/* sandlot_pause() flags. */
#define SANDLOT_PAUSE_MEMORY 0x1u /* keep the running state too (backends that can) */

/* Pause a sandbox made with a kept workspace (sandlot_options_t.workspace):
 * what sandlot_resume() needs is kept under the workspace's name and made
 * durable, and the sandbox's processes end (commands in flight end as
 * killed).  Then release the handle with sandlot_destroy() as usual: the
 * kept workspace stays.  What is kept depends on the backend (see
 * docs/libsandlot.md, "Pause and resume"): an ns sandbox keeps the files of
 * /home/user and /tmp only, not its processes or memory, and refuses
 * SANDLOT_PAUSE_MEMORY with ENOTSUP.
 * Returns 0, or -1 with the sandbox untouched (still running): EINVAL
 * (no kept workspace, unknown flags), ENOTSUP (the backend cannot pause,
 * or not with these flags); or EPIPE (it had ended already); any other
 * error comes with the sandbox ended (sandlot_alive() is 0) and its files
 * kept as far as they reached the disk. */
SANDLOT_API int sandlot_pause(sandlot_t *sb, unsigned flags, sandlot_error_t **err);

/* Resume a paused sandbox: sandlot_create() on what sandlot_pause() kept
 * under opts->workspace (required: EINVAL without).  Give the options the
 * paused sandbox had (its id too, to keep it).  Never starts on a fresh
 * workspace: ENOENT when there is no kept workspace of that name; EBUSY
 * while another sandbox uses it; ENOTSUP for a backend that cannot
 * resume.  A sandlot_create() with the same workspace also starts on its
 * files, but would make an empty one where there is none. */
SANDLOT_API sandlot_t *sandlot_resume(const sandlot_options_t *opts, sandlot_error_t **err);

/* Kept workspaces (sandlot_options_t.workspace) of the data directory
 * opts->data_dir (NULL opts: the default data directory), whichever
 * backend keeps them.
 *
 * Copy the kept workspace `src` to the new one `dst` (EEXIST if it exists),
 * with everything a pause kept there (the snapshot of a paused sandbox,
 * which a sandlot_resume() on dst starts from): for ns sandboxes a
 * snapshot, whatever the size (copy on write), admitted like a new
 * workspace of src's quota with opts->disk_overcommit (ENOSPC when it
 * cannot be).  dst appears complete or not at all.  EBUSY while a sandbox
 * is using src (and a sandbox trying to take src during the copy waits,
 * then gets EBUSY). */
SANDLOT_API int sandlot_workspace_copy(const sandlot_options_t *opts, const char *src,
				       const char *dst, sandlot_error_t **err);
/* Delete a kept workspace.  ENOENT if there is none, EBUSY while in use. */
SANDLOT_API int sandlot_workspace_remove(const sandlot_options_t *opts, const char *name,
					 sandlot_error_t **err);
/* The quota of a kept workspace in bytes.  ENOENT if there is none. */
SANDLOT_API int sandlot_workspace_size(const sandlot_options_t *opts, const char *name,
				       uint64_t *bytes, sandlot_error_t **err);
/* The names of the kept workspaces: *names is a NULL-terminated array
 * to free with sandlot_strv_free().  Empty when the data directory has no
 * storage pool yet. */
SANDLOT_API int sandlot_workspace_list(const sandlot_options_t *opts, char ***names,
				       sandlot_error_t **err);
/* Make the kept workspaces' files durable (after pausing a sandbox). */
SANDLOT_API int sandlot_workspace_sync(const sandlot_options_t *opts, sandlot_error_t **err);
/* Bring a workspace image of sandlot's former layout (an ext4 image file,
 * as sandlotd kept them in <data-dir>/workspaces/<id>.img) into the storage
 * pool as the kept workspace `name`, with the image's size as its quota.
 * The image is read, never changed: delete it after success.  Give only
 * images sandlot made (the host kernel mounts them, read-only). */
SANDLOT_API int sandlot_workspace_import(const sandlot_options_t *opts, const char *name,
					 const char *image, sandlot_error_t **err);
/* Archives of kept workspaces, to move them between hosts.  Export writes
 * the kept workspace `name` to fd as a POSIX tar of its home/ and tmp/
 * (owners as sandbox uids, user.* extended attributes); it holds the
 * workspace like a copy does (EBUSY while a sandbox uses it).  ENOTSUP
 * for a backend whose kept workspace is not files (vm).  Import makes the
 * new kept workspace `name` (EEXIST if there is one) with a quota of
 * `bytes` from such a tar read from fd, admitted like a new workspace;
 * it appears complete or not at all (EDQUOT when the files do not fit,
 * EIO for an archive that is not one).  Give it archives of trusted
 * origin or checked ones: nothing in one can reach outside the new
 * workspace, but its files become the next sandbox's. */
SANDLOT_API int sandlot_workspace_export(const sandlot_options_t *opts, const char *name, int fd,
					 sandlot_error_t **err);
SANDLOT_API int sandlot_workspace_import_tar(const sandlot_options_t *opts, const char *name,
					     uint64_t bytes, int fd, sandlot_error_t **err);
SANDLOT_API void sandlot_strv_free(char **v);

/* The data directory's storage pool: its size, the part quotas may add up
 * to without overcommit, and what they add up to now.  ENOENT when there
 * is no pool yet. */
typedef struct sandlot_storage_info {
	size_t size;               /* set to sizeof before the call: see "Versioned structs" above */
	uint64_t pool_bytes;
	uint64_t usable_bytes;
	uint64_t reserved_bytes;
} sandlot_storage_info_t;
SANDLOT_API int sandlot_storage_info(const sandlot_options_t *opts, sandlot_storage_info_t *out,
				     sandlot_error_t **err);
/* Grow the storage pool (making it if there is none) to at least `bytes`
 * (it never shrinks; it also grows by itself as workspaces are admitted).
 * ENOSPC when the data filesystem does not have the room. */
SANDLOT_API int sandlot_storage_grow(const sandlot_options_t *opts, uint64_t bytes,
				     sandlot_error_t **err);
/* Unmount the storage pool (it is mounted on first use and stays mounted,
 * under <data-dir>/storage/mnt, for the next sandbox).  Sandboxes still
 * running keep their workspaces: the pool then leaves the host's mount
 * table at once and goes, with its loop device, when the last of them
 * ends. */
SANDLOT_API int sandlot_storage_unmount(const sandlot_options_t *opts, sandlot_error_t **err);

typedef struct sandlot_usage {
	size_t size;                /* set to sizeof before the call: see "Versioned structs" above */
	uint64_t memory_bytes;      /* current memory use of the whole sandbox */
	uint64_t memory_peak_bytes; /* high-water mark, 0 if the host cannot tell */
	uint32_t pids;              /* processes now, init included */
	uint64_t cpu_usec;          /* CPU time consumed */
	uint64_t oom_kills;         /* OOM kills so far */
	uint64_t pids_limit_hits;   /* forks refused by the pids limit so far */
} sandlot_usage_t;

SANDLOT_API int sandlot_usage(sandlot_t *sb, sandlot_usage_t *out, sandlot_error_t **err);

/* ---- ports: connections to servers inside the sandbox ------------------ */

/* Open a TCP connection to `port` (1 to 65535) on the sandbox's own
 * loopback interface, where a server inside listening on 0.0.0.0,
 * 127.0.0.1, [::] or [::1] accepts it: the one way in from the host.  The
 * sandbox itself has no route to anything, and nothing else on the host can
 * connect to it; callers that expose a port (sandlotd) relay bytes between
 * their own listener and such connections.
 *
 * 127.0.0.1 is tried first, then [::1] if that is refused (a server bound
 * to ::1 only, as development servers are where "localhost" means ::1).
 * Each attempt waits up to timeout_ms (0: 5000) for the server's kernel to
 * accept; on loopback that takes microseconds unless the server's accept
 * queue is full.
 *
 * Returns a connected, blocking socket the caller owns (O_CLOEXEC), or -1:
 * EINVAL (port out of range), ECONNREFUSED (nothing listens on the port
 * inside), ETIMEDOUT (not accepted in time), EPIPE (the sandbox has ended).
 * It never waits on the sandbox's init, but it does block: not from
 * library callbacks. */
SANDLOT_API int sandlot_port_connect(sandlot_t *sb, unsigned port, unsigned timeout_ms,
				     sandlot_error_t **err);
/* ---- network ----------------------------------------------------------- */

/* Check a policy without applying it: EINVAL naming the bad rule. */
SANDLOT_API int sandlot_net_policy_validate(const sandlot_net_policy_t *policy,
					    sandlot_error_t **err);

/* Replace the network policy of a running sandbox.  From the moment it
 * returns, DNS answers and new connections follow the new policy, and every
 * connection the new policy would not allow has been closed.  0, or -1
 * with EINVAL (a bad rule; the old policy stays) or the error of setting
 * the network up (then the sandbox has no network: loopback only). */
SANDLOT_API int sandlot_set_network(sandlot_t *sb, const sandlot_net_policy_t *policy,
				    sandlot_error_t **err);

/* The policy a sandbox has now: mode, and the rules (normalised:
 * lowercase, no trailing dot) as NULL-terminated lists owned by the
 * sandbox and valid until the next sandlot_set_network() or destroy. */
SANDLOT_API sandlot_network_t sandlot_network(sandlot_t *sb, const char *const **allow,
					      const char *const **deny);

/* Process-wide settings of the egress engine, applied to every sandbox with
 * a network.  Call it before the first such sandbox is created (later:
 * EBUSY).  Without a call, SANDLOT_RESOLVER and SANDLOT_EGRESS_ALLOW_RANGES
 * (comma-separated) from the environment are used, else the defaults. */
typedef struct sandlot_net_config {
	size_t size;               /* sizeof(this struct): see "Versioned structs" above */
	/* Upstream DNS servers, "ADDR[:PORT]" comma-separated (IPv4).  NULL:
	 * the nameservers of the host's /etc/resolv.conf. */
	const char *resolver;
	/* Closed ranges the operator opens ("10.20.0.0/16"), NULL-terminated. */
	const char *const *allow_ranges;
	uint32_t max_connections; /* per sandbox at a time; 0: 256 */
	uint32_t dns_qps;         /* DNS queries per second per sandbox; 0: 100 */
} sandlot_net_config_t;
SANDLOT_API int sandlot_net_configure(const sandlot_net_config_t *cfg, sandlot_error_t **err);

/* One entry of a sandbox's network log: a DNS query or a TCP connection,
 * allowed or refused, with the reason.  Kept in a ring of the last 1024. */
typedef struct sandlot_net_event {
	uint64_t seq;            /* from 1, in order */
	int64_t time_ms;         /* wall clock, ms since the epoch */
	const char *layer;       /* "dns", "tls", "http", "tcp" (no name seen) */
	const char *verdict;     /* "allowed" or "refused" */
	/* allowed, not_allowed, denied, no_name, bad_name, ip_literal,
	 * closed_address, address_mismatch, malformed, too_big, timeout,
	 * connection_limit, rate_limit, resolve_failed, connect_failed,
	 * policy_changed, unsupported_type, no_address */
	const char *reason;
	char name[256];          /* the name asked for (DNS, SNI, Host), or "" */
	char addr[16];           /* destination (IPv4 dotted), or "" */
	uint16_t port;           /* destination port, 0 for DNS */
	uint16_t qtype;          /* DNS query type, 0 otherwise */
	uint32_t answers;        /* DNS: addresses answered */
	uint64_t bytes_out;      /* TCP: sent by the sandbox, so far */
	uint64_t bytes_in;       /* TCP: received by the sandbox, so far */
} sandlot_net_event_t;

/* Entries with seq > after, oldest first: a new array of *count entries
 * (free with free()).  *dropped: how many entries after `after` the ring
 * has already forgotten.  A sandbox without a network has an empty log.
 * (A macro: the array is laid out with the caller's sizeof of an entry.) */
#define sandlot_net_log(sb, after, out, count, dropped, err) \
	sandlot_net_log_sized((sb), (after), (out), (count), (dropped), sizeof(sandlot_net_event_t), (err))
SANDLOT_API int sandlot_net_log_sized(sandlot_t *sb, uint64_t after, sandlot_net_event_t **out,
				      size_t *count, uint64_t *dropped, size_t entry_size,
				      sandlot_error_t **err);

/* Counters of the whole process (for metrics). */
typedef struct sandlot_net_stats {
	size_t size;               /* set to sizeof before the call (else nothing is written) */
	uint64_t dns_allowed, dns_refused;
	uint64_t tcp_allowed, tcp_refused;
	uint64_t bytes_out, bytes_in;
	uint64_t connections_open;
	uint64_t refused_by_reason[20]; /* indexed as sandlot_net_reason_name() */
} sandlot_net_stats_t;
SANDLOT_API void sandlot_net_stats(sandlot_net_stats_t *out);
/* Name of reason index i of refused_by_reason, NULL past the last. */
SANDLOT_API const char *sandlot_net_reason_name(unsigned i);

/* ---- packages ----------------------------------------------------------- */

/* Package installs (docs/network.md, "Packages").  pip packages go to the
 * sandbox user's site-packages (pip --user, under /home/user/.local), npm
 * packages to /home/user/node_modules.  The downloads happen in a separate,
 * short-lived sandbox of the same image whose network is the sandbox's
 * policy plus the registries, and which runs no package code (pip
 * downloads wheels only; npm runs no install scripts); what it fetched is
 * kept in a host-side cache (root-only) that no sandbox can write, then
 * copied into the sandbox, which installs it offline.  A second install of
 * the same pinned packages (pip name==version, npm name@x.y.z) downloads
 * nothing. */
typedef struct sandlot_packages {
	size_t size;               /* sizeof(this struct): see "Versioned structs" above */
	/* "pandas==2.2.0", "requests>=2,<3", "uvicorn[standard]": requirement
	 * specifiers only (no options, URLs, paths or markers). */
	const char *const *pip;
	/* "lodash@4", "@types/node@20.11.0", "left-pad": registry packages only
	 * (no git, URL, file or alias specifiers). */
	const char *const *npm;
} sandlot_packages_t;

typedef struct sandlot_packages_config {
	size_t size;               /* sizeof(this struct): see "Versioned structs" above */
	const char *pip_index;          /* default https://pypi.org/simple */
	/* Hosts the download may reach besides the index's; default
	 * files.pythonhosted.org with the default index, none otherwise. */
	const char *const *pip_hosts;
	const char *npm_registry;       /* default https://registry.npmjs.org/ */
	const char *const *npm_hosts;   /* besides the registry's host; default none */
	const char *ca_file;            /* a PEM bundle pip and npm also trust, or NULL */
	const char *cache_dir;          /* default <data dir>/cache/packages */
} sandlot_packages_config_t;

/* Process-wide, before the first install (EBUSY after).  Without a call,
 * SANDLOT_PIP_INDEX, SANDLOT_PIP_HOSTS, SANDLOT_NPM_REGISTRY,
 * SANDLOT_NPM_HOSTS, SANDLOT_PACKAGE_CA and SANDLOT_PACKAGE_CACHE
 * (comma-separated lists) from the environment, else the defaults. */
SANDLOT_API int sandlot_packages_configure(const sandlot_packages_config_t *cfg,
					   sandlot_error_t **err);

/* Check the specifiers without installing: EINVAL naming the bad one. */
SANDLOT_API int sandlot_packages_validate(const sandlot_packages_t *pk, sandlot_error_t **err);

typedef struct sandlot_install_result {
	size_t size;           /* set to sizeof before the call: see "Versioned structs" above */
	char *output;          /* what pip and npm printed (at most 256 KiB); free() it */
	int from_cache;        /* nothing was downloaded */
	uint64_t duration_ms;
} sandlot_install_result_t;

/* Install packages into a running sandbox; blocks until done (at most 10
 * minutes for the download and 10 for the install).  0, or -1: EINVAL (a
 * bad specifier), ENOENT (pip or npm missing from the image), EIO (the
 * installer failed: the message says which and why, out->output has all
 * it printed), or the error of the download sandbox.  out is filled in
 * both cases. */
SANDLOT_API int sandlot_install_packages(sandlot_t *sb, const sandlot_packages_t *pk,
					 sandlot_install_result_t *out, sandlot_error_t **err);

/* ---- processes --------------------------------------------------------- */

typedef enum { SANDLOT_STDOUT = 1, SANDLOT_STDERR = 2 } sandlot_stream_t;

typedef struct sandlot_exit {
	/* sandlot_proc_wait(): set to sizeof before the call; on_exit: the
	 * library's (see "Versioned structs" above). */
	size_t size;
	int exit_code;          /* exit status if exited, else -1 */
	int signal;             /* terminating signal if killed, else 0 */
	int timed_out;          /* killed because timeout_ms passed */
	int oom_killed;         /* the sandbox hit its memory limit during the run */
	int pids_limited;       /* the sandbox hit its pids limit during the run (a fork was refused) */
	int start_error;        /* errno if the command could not start (then exit_code 127 or 126) */
	uint64_t duration_ms;   /* wall time from start to exit */
	char error[256];        /* why it could not start, when start_error != 0 */
} sandlot_exit_t;

typedef struct sandlot_exec_callbacks {
	size_t size;               /* sizeof(this struct): see "Versioned structs" above */
	/* Output as it arrives.  Return 0 to keep receiving, or 1 to pause the
	 * command's output until sandlot_proc_resume_output() (flow control):
	 * the sandbox stops sending once what is in flight (at most one 256 KiB
	 * window, shared by stdout and stderr) has arrived, and the command
	 * blocks when its pipe is full.  Calls made meanwhile still deliver
	 * that in-flight data. */
	int (*on_output)(void *userdata, sandlot_stream_t stream, const void *data, size_t len);
	/* Called exactly once when the process has ended (or failed to start). */
	void (*on_exit)(void *userdata, const sandlot_exit_t *status);
	void *userdata;
} sandlot_exec_callbacks_t;

typedef struct sandlot_exec_spec {
	size_t size;               /* sizeof(this struct): see "Versioned structs" above */
	const char *const *argv;   /* required; argv[0] is looked up in PATH */
	const char *const *env;    /* extra "K=V", override the sandbox's; may be NULL */
	const char *cwd;           /* default /home/user; relative = under /home/user */
	int stdin_pipe;            /* 1: stdin fed by sandlot_proc_write_stdin(); 0: /dev/null */
	uint64_t timeout_ms;       /* 0 = none; on expiry the process group is killed */
	int last;                  /* 1: the sandbox's last command (a one-shot run): init readies
				    * no spare process for a next one after it; a later exec
				    * still works, its process forked on demand */
} sandlot_exec_spec_t;

typedef struct sandlot_proc sandlot_proc_t;

/* Start a command.  Returns a handle owned by the caller (release with
 * sandlot_proc_free() after on_exit has run or after sandlot_proc_wait()). */
SANDLOT_API sandlot_proc_t *sandlot_exec(sandlot_t *sb, const sandlot_exec_spec_t *spec,
					 const sandlot_exec_callbacks_t *cb, sandlot_error_t **err);

/* Take over a command that is still running in a vm sandbox resumed from a
 * pause with memory: pid is its pid in the sandbox (sandlot_proc_pid() of
 * the handle that started it, before the pause).  The handle works as one
 * from sandlot_exec() with stdin_pipe set; output the command wrote while
 * no host was attached is lost.  Blocks until the sandbox's init answers
 * (not from an exec callback).  Fails with ESRCH when no such command is
 * running (it ended, is attached already, or the sandbox was not resumed
 * with its memory: always in an ns sandbox), with EAGAIN while the command
 * has not yet read all of its earlier input. */
SANDLOT_API sandlot_proc_t *sandlot_exec_attach(sandlot_t *sb, pid_t pid,
						const sandlot_exec_callbacks_t *cb,
						sandlot_error_t **err);

/* Feed stdin (blocks while the sandbox side has no room: flow control).
 * len == 0 is a no-op.  Fails with EPIPE once the process has exited. */
SANDLOT_API int sandlot_proc_write_stdin(sandlot_proc_t *p, const void *data, size_t len,
					 sandlot_error_t **err);
SANDLOT_API int sandlot_proc_close_stdin(sandlot_proc_t *p, sandlot_error_t **err);

/* Send a signal to the process group of the command. */
SANDLOT_API int sandlot_proc_kill(sandlot_proc_t *p, int sig, sandlot_error_t **err);

SANDLOT_API void sandlot_proc_resume_output(sandlot_proc_t *p);

/* Block until the process has ended; fills *out if non-NULL (its size set
 * first: EINVAL otherwise, before waiting). */
SANDLOT_API int sandlot_proc_wait(sandlot_proc_t *p, sandlot_exit_t *out, sandlot_error_t **err);

SANDLOT_API pid_t sandlot_proc_pid(const sandlot_proc_t *p); /* pid inside the sandbox */
SANDLOT_API void sandlot_proc_free(sandlot_proc_t *p);

/* ---- files (paths are inside the sandbox; relative = under /home/user) -- */

/* Source/sink callbacks for streaming transfers.  A read_fn returns bytes
 * produced (0 = end, -1 = error with errno set); a write_fn returns 0 or -1. */
typedef ssize_t (*sandlot_read_fn)(void *userdata, void *buf, size_t len);
typedef int (*sandlot_write_fn)(void *userdata, const void *buf, size_t len);

#define SANDLOT_WRITE_MKDIRS 0x1   /* create missing parent directories */

/* Write a file atomically: the data goes to a temporary file that replaces
 * path only when all of it was written.  On any failure (ENOSPC included)
 * no partial file is left. */
SANDLOT_API int sandlot_file_write(sandlot_t *sb, const char *path, uint32_t mode, unsigned flags,
				   sandlot_read_fn src, void *userdata, sandlot_error_t **err);
SANDLOT_API int sandlot_file_write_fd(sandlot_t *sb, const char *path, uint32_t mode,
				      unsigned flags, int fd, sandlot_error_t **err);

/* Read a regular file, streaming it to sink.  ENOENT if missing. */
SANDLOT_API int sandlot_file_read(sandlot_t *sb, const char *path, sandlot_write_fn sink,
				  void *userdata, sandlot_error_t **err);
SANDLOT_API int sandlot_file_read_fd(sandlot_t *sb, const char *path, int fd,
				     sandlot_error_t **err);

/* Read at most max_bytes (0: no limit): a larger file fails with EFBIG
 * before any data ("the file is N bytes, over the limit of M bytes"), and
 * one that grows past the limit while it is read fails with EFBIG then, so
 * a sparse file of terabytes cannot make a reader run for hours. */
SANDLOT_API int sandlot_file_read_fd_max(sandlot_t *sb, const char *path, int fd,
					 uint64_t max_bytes, sandlot_error_t **err);

/* Streaming in the other direction, for callers that are themselves fed or
 * drained piecewise (an HTTP server).
 *
 * A reader is opened only once init has opened the file, so a missing file
 * fails here (ENOENT), before any data.  reader_read() blocks until data is
 * there and returns the bytes read, 0 at the end of the file, -1 on error.
 * Closing before the end aborts the transfer inside the sandbox. */
typedef struct sandlot_file_reader sandlot_file_reader_t;
SANDLOT_API sandlot_file_reader_t *sandlot_file_open_read(sandlot_t *sb, const char *path,
							  sandlot_error_t **err);
/* The same with a size limit, as sandlot_file_read_fd_max(): a larger file
 * fails here (EFBIG), before any data. */
SANDLOT_API sandlot_file_reader_t *sandlot_file_open_read_max(sandlot_t *sb, const char *path,
							      uint64_t max_bytes,
							      sandlot_error_t **err);
SANDLOT_API ssize_t sandlot_file_reader_read(sandlot_file_reader_t *r, void *buf, size_t len,
					     sandlot_error_t **err);
SANDLOT_API void sandlot_file_reader_close(sandlot_file_reader_t *r);

/* A writer sends data as it is given; an error inside the sandbox (ENOSPC,
 * a missing parent) is reported by the next writer_write() or by commit.
 * commit() makes the file appear (atomically) and frees w; abort() removes
 * the temporary file and frees w.  Exactly one of them must be called. */
typedef struct sandlot_file_writer sandlot_file_writer_t;
SANDLOT_API sandlot_file_writer_t *sandlot_file_open_write(sandlot_t *sb, const char *path,
							   uint32_t mode, unsigned flags,
							   sandlot_error_t **err);
SANDLOT_API int sandlot_file_writer_write(sandlot_file_writer_t *w, const void *data, size_t len,
					  sandlot_error_t **err);
SANDLOT_API int sandlot_file_writer_commit(sandlot_file_writer_t *w, sandlot_error_t **err);
SANDLOT_API void sandlot_file_writer_abort(sandlot_file_writer_t *w);

typedef enum {
	SANDLOT_FILE = 'f',
	SANDLOT_DIR = 'd',
	SANDLOT_SYMLINK = 'l',
	SANDLOT_OTHER = 'o',
} sandlot_file_type_t;

typedef struct sandlot_stat {
	sandlot_file_type_t type;
	uint32_t mode;        /* permission bits */
	uint64_t size;        /* apparent size (what a read returns) */
	int64_t mtime_ns;     /* nanoseconds since the epoch */
	uint64_t allocated;   /* bytes it takes on disk: far below size for a sparse file */
} sandlot_stat_t;

/* (A macro: *out is filled as far as the caller's sandlot_stat_t goes.) */
#define sandlot_stat(sb, path, out, err) \
	sandlot_stat_sized((sb), (path), (out), sizeof(sandlot_stat_t), (err))
SANDLOT_API int sandlot_stat_sized(sandlot_t *sb, const char *path, sandlot_stat_t *out,
				   size_t out_size, sandlot_error_t **err);

typedef struct sandlot_dirent {
	char *name;
	sandlot_stat_t st;    /* last: it grows with sandlot_stat_t */
} sandlot_dirent_t;

/* List a directory (not recursive).  *out is an array of *count entries the
 * caller frees with sandlot_dirents_free().  (Macros: the array is laid out
 * with the caller's sizeof of an entry.) */
#define sandlot_list(sb, path, out, count, err) \
	sandlot_list_sized((sb), (path), (out), (count), sizeof(sandlot_dirent_t), (err))
#define sandlot_dirents_free(entries, count) \
	sandlot_dirents_free_sized((entries), (count), sizeof(sandlot_dirent_t))
SANDLOT_API int sandlot_list_sized(sandlot_t *sb, const char *path, sandlot_dirent_t **out,
				   size_t *count, size_t entry_size, sandlot_error_t **err);
SANDLOT_API void sandlot_dirents_free_sized(sandlot_dirent_t *entries, size_t count,
					    size_t entry_size);

#define SANDLOT_MKDIR_PARENTS 0x1
SANDLOT_API int sandlot_mkdir(sandlot_t *sb, const char *path, uint32_t mode, unsigned flags,
			      sandlot_error_t **err);

#define SANDLOT_REMOVE_RECURSIVE 0x1
SANDLOT_API int sandlot_remove(sandlot_t *sb, const char *path, unsigned flags,
			       sandlot_error_t **err);

/* ---- change tracking ---------------------------------------------------- */

typedef enum {
	SANDLOT_CREATED = 'c',
	SANDLOT_MODIFIED = 'm',
	SANDLOT_DELETED = 'd',
} sandlot_change_kind_t;

typedef struct sandlot_change {
	sandlot_change_kind_t kind;
	char *path;           /* absolute path inside the sandbox */
	sandlot_file_type_t type;
	uint64_t size;        /* 0 for deleted entries */
} sandlot_change_t;

typedef struct sandlot_changes {
	size_t size;          /* set to sizeof before the call: see "Versioned structs" above */
	sandlot_change_t *items;
	size_t count;
	/* Something was left out: the walk met its limits (100,000 entries,
	 * scan_memory_bytes, 256 levels: paths past the cut are neither
	 * reported nor remembered) or the report its byte limit (the changes
	 * after the last one in items are not reported; the next scan reports
	 * what changes after this one). */
	int truncated;
	uint64_t bytes;       /* the report's size as the limit counts it */
} sandlot_changes_t;

/* Compare the workspace (/home/user) with the previous scan and return what
 * was created, modified or deleted since, in path order.  The first call
 * (made by sandlot_create) records the baseline.  The caller frees *out
 * with sandlot_changes_free().  (Macros: out->items is laid out with the
 * caller's sizeof of an item.) */
#define sandlot_changes_scan(sb, out, err) \
	sandlot_changes_scan_sized((sb), 0, (out), sizeof(sandlot_change_t), (err))
/* The same, reporting at most max_bytes this time instead of the
 * sandbox's changes_max_bytes (0: that). */
#define sandlot_changes_scan_max(sb, max_bytes, out, err) \
	sandlot_changes_scan_sized((sb), (max_bytes), (out), sizeof(sandlot_change_t), (err))
#define sandlot_changes_free(c) sandlot_changes_free_sized((c), sizeof(sandlot_change_t))
SANDLOT_API int sandlot_changes_scan_sized(sandlot_t *sb, uint64_t max_bytes,
					   sandlot_changes_t *out, size_t item_size,
					   sandlot_error_t **err);
SANDLOT_API void sandlot_changes_free_sized(sandlot_changes_t *c, size_t item_size);

#ifdef __cplusplus
}
#endif

#endif
