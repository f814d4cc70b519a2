/* cgroup limits, accounting and kill for one sandbox.
 *
 * One interface, three implementations behind a function table chosen once,
 * at first use, for the whole process (as crun's cgroup-*.c):
 *
 *   v2    unified hierarchy: <root>/sandlot/<name>, root = /sys/fs/cgroup
 *         when that is cgroup2, else /sys/fs/cgroup/unified (hybrid hosts).
 *   v1    legacy hierarchies: /sys/fs/cgroup/<controller>/sandlot/<name> for
 *         memory, pids, cpu, cpuacct and freezer (those that are mounted;
 *         co-mounted ones such as "cpu,cpuacct" share one directory).
 *   none  no usable cgroups: limits cannot be applied.
 *
 * Detection: v2 if statfs("/sys/fs/cgroup") is cgroup2; else v1 if
 * /sys/fs/cgroup/memory is a cgroup v1 mount; else none.  Environment
 * overrides, read once at first use (meant for tests and odd hosts):
 *   SANDLOT_CGROUP=v1|v2|none   force the implementation
 *   SANDLOT_CGROUP_V2_ROOT=dir  cgroup2 directory to create "sandlot" under
 *   SANDLOT_CGROUP_V1_ROOT=dir  directory holding the v1 controller mounts
 *
 * Every function here follows the error contract of common/error.h.  The
 * functions are safe to call from several threads on different handles; a
 * handle itself is not locked.
 */
#ifndef SANDLOT_LINUX_CGROUP_H
#define SANDLOT_LINUX_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

struct sandlot_cgroup_limits {
	uint64_t memory_bytes; /* memory incl. swap (no swap beyond it); 0 = none */
	uint32_t cpus_milli;   /* CPU quota in thousandths of a CPU; 0 = none */
	uint32_t pids;         /* max tasks (threads count, as in pids.max); 0 = none */
};

typedef struct sandlot_cgroup sandlot_cgroup_t;

/* "v1", "v2" or "none": the implementation this process uses (decided at
 * the first call of any function here).  An invalid SANDLOT_CGROUP value
 * reports "none" and makes sandlot__cgroup_create() fail saying why. */
const char *sandlot__cgroup_mode(void);

/* cgroup v2 only: make `dir`, a directory below the v2 root (an absolute
 * path starting with it), the root under which sandbox cgroups are made
 * from now on ("<dir>/sandlot/<name>"): sandlotd nests its sandboxes below
 * its own cgroup so that a pod's limits bound them (daemon/node.c).  Call
 * it before any cgroup is made.  -1 with EINVAL when the mode is not v2 or
 * dir is not below the v2 root, ENAMETOOLONG when it is too long. */
int sandlot__cgroup_v2_nest(const char *dir);

/* Create the sandbox's cgroup(s) named `name` under a "sandlot" parent in each
 * hierarchy used (the parent is created on demand and never removed) and
 * apply the limits.  `name` must be one path component of [A-Za-z0-9._-]
 * (not "." or ".."), at most 128 characters; lim may be NULL (no limits).
 *
 * Fails with EEXIST if a cgroup of that name exists already (it is left
 * alone), with ENOTSUP naming the controller when a limit is asked for that
 * the host cannot enforce (in "none" mode: any limit), or with the errno of
 * the cgroup file that refused a value.  On failure nothing is left behind.
 *
 * In "none" mode a call without limits succeeds and returns a handle with no
 * directories: add_pid and usage are no-ops, kill fails with ENOTSUP (the
 * caller must kill through the pid namespace instead).
 *
 * Returns a handle the caller releases with sandlot__cgroup_destroy(). */
sandlot_cgroup_t *sandlot__cgroup_create(const char *name, const struct sandlot_cgroup_limits *lim,
					 sandlot_error_t **err);

/* Move process `pid` (all its threads) into the cgroup(s).  Its future
 * children are born there.  In v1 a failure may leave it in some of the
 * hierarchies; kill/destroy still find it there. */
int sandlot__cgroup_add_pid(sandlot_cgroup_t *cg, pid_t pid, sandlot_error_t **err);

/* Fill *out (all fields, zeroed first) with usage counters: memory now and
 * peak (peak 0 where the host cannot tell: v2 before memory.peak, 5.19),
 * tasks now (pids.current: threads count, and so do zombies until reaped;
 * without a pids controller, the processes in cgroup.procs), CPU time, OOM
 * kills and forks refused by the pids limit.  A counter the host does not
 * provide (e.g. memory on a v2 hierarchy without the memory controller)
 * stays 0.  Fails only if the cgroup cannot be read (e.g. it is gone). */
int sandlot__cgroup_usage(sandlot_cgroup_t *cg, sandlot_usage_t *out, sandlot_error_t **err);

/* Moving a process into a cgroup from outside takes a global lock whose
 * write side waits for an RCU grace period (milliseconds, tens of them on
 * some hosts).  A process that is born into the cgroup (v2:
 * clone3(CLONE_INTO_CGROUP)) or moves *itself* with a single thread (v1:
 * writing "0" to "tasks", permission checked against the opener of the
 * file) avoids it.  sandlot__cgroup_join_prepare() opens what is needed for
 * that before the child exists:
 *   v1: tasks_fd[] — the child writes "0" to each (join_self);
 *   v2: dir_fd — pass it to clone3 with CLONE_INTO_CGROUP.
 * Unused fields are -1 / 0.  In "none" mode there is nothing to join. */
struct sandlot_cgroup_join {
	int tasks_fd[8];
	int ntasks;
	int dir_fd;
};
int sandlot__cgroup_join_prepare(sandlot_cgroup_t *cg, struct sandlot_cgroup_join *j,
				 sandlot_error_t **err);
/* In the child, before it does anything else: move the calling
 * (single-threaded) process into every v1 hierarchy.  Async-signal-safe.
 * Returns 0 or -1 with errno. */
int sandlot__cgroup_join_self(const struct sandlot_cgroup_join *j);
/* Close what join_prepare opened (in the parent, after the child joined). */
void sandlot__cgroup_join_close(struct sandlot_cgroup_join *j);

/* Open the files that hold the OOM-kill counter (an "oom_kill N" line: v2
 * memory.events, v1 memory.oom_control) and the refused-fork counter (a
 * "max N" line: pids.events), read-only and close-on-exec, for the
 * sandbox's init to read before and after every command (init.h, fds 10
 * and 11).  Each is -1 where the host lacks it (a controller not mounted,
 * a kernel without the counter).  Never fails. */
void sandlot__cgroup_event_fds(sandlot_cgroup_t *cg, int *oom_fd, int *pids_fd);

/* Kill every process in the cgroup(s), including ones that setsid() or
 * double-forked, and wait (at most about 2 s) until no process is left.
 * v2: cgroup.kill (5.14+; older kernels: SIGKILL every pid in cgroup.procs,
 * repeated).  v1: freeze through the freezer hierarchy so nothing can fork,
 * SIGKILL every pid in cgroup.procs of every hierarchy, thaw, repeat until
 * empty (no freezer hierarchy: the same without freezing).
 * Killed processes that are children of the caller stay zombies until the
 * caller reaps them; they no longer count as "in the cgroup".
 * The caller must not itself be in the cgroup (v1 would freeze it).
 * Returns 0 once empty; ETIMEDOUT if processes remain after the deadline
 * (e.g. stuck in uninterruptible sleep); ENOTSUP in "none" mode.  The cgroup
 * stays usable (in v1 it is thawed again) and can take new processes. */
int sandlot__cgroup_kill(sandlot_cgroup_t *cg, sandlot_error_t **err);

/* Kill whatever is still inside, remove the cgroup directories this handle
 * created (retrying rmdir on EBUSY for up to about 1 s) and free cg.
 * NULL is a no-op.  Never fails and logs nothing: a directory that cannot be
 * removed is left for sandlot__cgroup_cleanup_stale(). */
void sandlot__cgroup_destroy(sandlot_cgroup_t *cg);

/* Free the handle and leave the cgroup as it is (another process — the
 * cleanup helper — removes it).  NULL is a no-op. */
void sandlot__cgroup_close(sandlot_cgroup_t *cg);

/* Remove leftover cgroups under the "sandlot" parent(s) whose names start
 * with `prefix`, that hold no process and that are at least min_age_s
 * seconds old, e.g. after a SIGKILLed `sandlot run`.  A cgroup holding any
 * process (in any v1 hierarchy) is left alone; the age guard leaves alone
 * one that a concurrent sandlot__cgroup_create() caller made but has not
 * populated yet (that takes milliseconds).  Returns the number of sandbox
 * cgroups (names) removed; never fails. */
int sandlot__cgroup_cleanup_stale(const char *prefix, unsigned min_age_s);

/* Remove the leftover cgroup named exactly `name` (one that a destroy could
 * not remove yet, or one of a sandbox whose owner crashed): with kill,
 * SIGKILL whatever is still inside first; then remove its directories in
 * every hierarchy.  Returns 1 while some directory of it remains (the
 * kernel is still finishing with its processes: try again later), 0 when
 * none does.  Only for names the caller knows to be its own. */
int sandlot__cgroup_remove_named(const char *name, int kill);

/* ---- prepared cgroups (cgroup-pool.c) -------------------------------------
 *
 * Making a cgroup costs a mkdir per hierarchy (five on a v1 host) and a
 * write per limit — about 0.3 ms on the 2-CPU test host, on the critical
 * path of every sandbox — and removing it another 0.2 ms.  So a long-lived
 * process (sandlotd, through sandlot_prepare()) keeps a small set prepared
 * ahead of time, off that path, with the limits the next sandboxes are
 * likely to ask for: each is an ordinary sandbox cgroup "sb-<id>" under
 * sandlot/ in every hierarchy, plus a marker file
 * "<pool>/<name>.<memory>.<pids>.<cpus_milli>" saying that it is free and
 * which limits it holds.  Taking one is atomic across threads and
 * processes: whoever unlinks its marker owns it.  The taker uses the name
 * as the new sandbox's id and reserves it in this process, so that
 * sandlot__cgroup_create() with that name adopts the directories instead
 * of making them and writes only the limits that differ.  A taken cgroup
 * is used once and removed with its sandbox like any other: a sandbox never
 * inherits another's counters or charged memory.
 *
 * Ownership.  There is one pool per data directory (and set of
 * hierarchies): /run/sandlot/cgroup-pool/<mode>-<hash> (the base is
 * SANDLOT_CGROUP_POOL_DIR if set, for tests), holding the markers, a file
 * "data-dir" naming the data directory, and "preparer.lock", on which the
 * process that fills the pool holds a shared flock for as long as it does
 * (sandlot__cgroup_pool_hold).  Anyone with that data directory may take
 * from it (`sandlot run` beside sandlotd does).  The preparer drains and
 * removes the pool when it stops; the free cgroups of a preparer that died
 * (SIGKILL) are taken over by the next one of the same data directory or
 * drained, with the pool directory, by sandlot__cgroup_pool_reclaim(),
 * which the stale collectors run: a pool whose lock nobody holds has no
 * owner.  So free prepared
 * cgroups never outlive their preparer for long, and every one is
 * attributable to a data directory.  In "none" mode there is no pool.
 *
 * sandlot__cgroup_cleanup_stale() leaves prepared cgroups alone; a taker
 * touches the cgroup's directory before it unlinks the marker, so the age
 * guard protects a taken one until its sandbox populates it. */

/* Take a prepared cgroup of data_dir's pool whose marker says `lim` if
 * there is one, else any (its limits are rewritten on adoption); write its
 * name ("sb-" and 26 characters, 30 bytes with the NUL) to name.  1 when
 * one was taken, 0 when the pool is empty or unusable (the caller makes a
 * name itself). */
int sandlot__cgroup_pool_take(const char *data_dir, const struct sandlot_cgroup_limits *lim,
			      char name[32]);

/* Give back a name taken with sandlot__cgroup_pool_take() that no
 * sandlot__cgroup_create() will use after all (its marker is made again).
 * Names not reserved by this process are ignored. */
void sandlot__cgroup_pool_return(const char *name);

/* Prepare cgroups with limits `lim` until `target` are free in data_dir's
 * pool.  Returns how many were made; never fails (a cgroup that cannot be
 * made is simply not there).  Only for the pool's preparer (after
 * sandlot__cgroup_pool_hold), off the critical path. */
unsigned sandlot__cgroup_pool_fill(const char *data_dir, const struct sandlot_cgroup_limits *lim,
				   unsigned target);

/* Free cgroups in data_dir's pool now. */
unsigned sandlot__cgroup_pool_count(const char *data_dir);

/* Remove every free prepared cgroup of data_dir's pool and its marker;
 * returns how many.  The preparer does it when it stops. */
unsigned sandlot__cgroup_pool_drain(const char *data_dir);

/* Become the preparer of data_dir's pool: make the pool directory and take
 * a shared flock on its preparer.lock.  The descriptor (for
 * sandlot__cgroup_pool_release), or -1 with an error. */
int sandlot__cgroup_pool_hold(const char *data_dir, sandlot_error_t **err);

/* Stop being the preparer: drain the pool, remove its directory and close
 * `fd` (from sandlot__cgroup_pool_hold).  -1: a no-op. */
void sandlot__cgroup_pool_release(const char *data_dir, int fd);

/* Drain every pool on the host whose preparer is gone (nobody holds its
 * lock); returns how many cgroups were removed.  A readdir and a flock per
 * pool: for the stale collectors, off the critical path. */
unsigned sandlot__cgroup_pool_reclaim(void);

/* Spares of `sandlot run`.  A one-shot run has no process that outlives it
 * to prepare for the next one, so its cleanup helper (backend/ns-helper.c)
 * fills data_dir's pool after the teardown, to `target` (at most
 * SANDLOT_CGROUP_SPARE_MAX) with limits `lim`, holding the preparer's lock
 * only meanwhile, and marks the pool: its preparer.lock says "spare".  A
 * pool so marked is not drained by the reclaim while its data directory
 * exists and it holds no more than SANDLOT_CGROUP_SPARE_MAX free cgroups.  They go with
 * `sandlot drain` (sandlot__cgroup_pool_drain_spare), with the data
 * directory (the reclaim), or with a sandlotd of the data directory that
 * takes the pool over and drains it when it stops.  Returns how many were
 * made; never fails. */
#define SANDLOT_CGROUP_SPARE_MAX 2
unsigned sandlot__cgroup_pool_spare(const char *data_dir, const struct sandlot_cgroup_limits *lim,
				    unsigned target);

/* Drain data_dir's pool and remove it, unless a preparer (sandlotd) holds
 * it; returns how many cgroups were removed. */
unsigned sandlot__cgroup_pool_drain_spare(const char *data_dir);

/* Whether `name` has a marker in any pool (a free prepared cgroup). */
bool sandlot__cgroup_pool_has(const char *name);

/* Directory of the cgroup for `controller` ("memory", "pids", "cpu",
 * "cpuacct", "freezer"), for tests and diagnostics.  v2 has one directory
 * whatever the controller ("" is the usual spelling); in v1 "" means the
 * memory directory.  NULL when the hierarchy is not used (or in "none"
 * mode).  The string is owned by cg. */
const char *sandlot__cgroup_path(sandlot_cgroup_t *cg, const char *controller);

/* ---- internal: shared by cgroup.c, cgroup-v1.c and cgroup-v2.c ---------- */

/* v1 hierarchies used, in the order processes are added to them (freezer
 * first so a process is freezable as soon as it is anywhere). */
enum sandlot_cg_ctrl {
	SL_CG_FREEZER,
	SL_CG_MEMORY,
	SL_CG_PIDS,
	SL_CG_CPU,
	SL_CG_CPUACCT,
	SL_CG_NCTRL,
};

struct sandlot_cgroup {
	const struct sandlot_cgroup_ops *ops;
	char *name;
	/* v1: one directory per controller (NULL if that hierarchy is not
	 * mounted; co-mounted controllers share the same string contents).
	 * v2: dir[0] only. */
	char *dir[SL_CG_NCTRL];
	/* The directory was made by this handle and is removed by destroy;
	 * false for the second name of a co-mounted hierarchy. */
	bool owned[SL_CG_NCTRL];
};

struct sandlot_cgroup_ops {
	const char *mode;
	/* cg->name is set and every dir NULL; fill dirs, make them, apply lim.
	 * On failure remove what was made (sandlot__cgroup_rmdirs). */
	int (*create)(sandlot_cgroup_t *cg, const struct sandlot_cgroup_limits *lim,
		      sandlot_error_t **err);
	/* The same for a prepared cgroup that exists already with limits
	 * `preset`: fill dirs (owned), change only the limits that differ.
	 * On failure the directories are left to the caller (cg->owned set
	 * for those found). */
	int (*adopt)(sandlot_cgroup_t *cg, const struct sandlot_cgroup_limits *preset,
		     const struct sandlot_cgroup_limits *lim, sandlot_error_t **err);
	int (*add_pid)(sandlot_cgroup_t *cg, pid_t pid, sandlot_error_t **err);
	int (*usage)(sandlot_cgroup_t *cg, sandlot_usage_t *out, sandlot_error_t **err);
	int (*kill)(sandlot_cgroup_t *cg, sandlot_error_t **err);
	int (*cleanup_stale)(const char *prefix, unsigned min_age_s);
	const char *(*path)(sandlot_cgroup_t *cg, const char *controller);
};

extern const struct sandlot_cgroup_ops sandlot__cgroup_v1_ops;
extern const struct sandlot_cgroup_ops sandlot__cgroup_v2_ops;

/* Roots chosen at first use (environment overrides applied). */
const char *sandlot__cgroup_v1_root(void);
const char *sandlot__cgroup_v2_root(void);
/* The implementation in use (chosen at first use). */
const struct sandlot_cgroup_ops *sandlot__cgroup_ops(void);

/* If `name` was taken from the pool by this process and not yet adopted:
 * forget the reservation, store the limits its marker named in *preset
 * and return 1; else 0.  (cgroup-pool.c, for sandlot__cgroup_create.) */
int sandlot__cg_pool_claimed(const char *name, struct sandlot_cgroup_limits *preset);

/* Shared helpers (cgroup.c). */

/* Read "<dir>/<file>" (at most 64 KiB) into a new string, NULL + errno. */
char *sandlot__cg_read(const char *dir, const char *file);
/* Write value to "<dir>/<file>"; 0 or -1 with errno. */
int sandlot__cg_write(const char *dir, const char *file, const char *value);
/* Whether "<dir>/<file>" exists. */
bool sandlot__cg_exists(const char *dir, const char *file);
/* Read a decimal number from "<dir>/<file>" (first token); -1 + errno. */
int sandlot__cg_read_u64(const char *dir, const char *file, uint64_t *out);
/* Find "key N" in a flat-keyed file such as memory.events; -1 (errno ENOENT
 * if the file or key is missing). */
int sandlot__cg_read_key(const char *dir, const char *file, const char *key, uint64_t *out);
/* Pids listed in "<dir>/cgroup.procs" into a new array (*n entries).  NULL
 * with errno on failure; an empty cgroup gives a non-NULL array, *n == 0. */
pid_t *sandlot__cg_procs(const char *dir, size_t *n);
/* SIGKILL every pid in "<dir>/cgroup.procs".  Returns how many were listed
 * (0 = empty), -1 + errno if the file cannot be read. */
int sandlot__cg_kill_procs(const char *dir);
/* rmdir, retrying on EBUSY for up to about timeout_ms.  0 or -1 + errno;
 * ENOENT counts as success. */
int sandlot__cg_rmdir(const char *dir, unsigned timeout_ms);
/* Remove the directories the handle owns (reverse order), ignoring errors. */
void sandlot__cg_rmdirs(sandlot_cgroup_t *cg);
/* snprintf into a PATH_MAX buffer: 0, or -1 with errno ENAMETOOLONG when the
 * result does not fit (a cut path would name the wrong directory). */
int sandlot__cg_pathf(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Sleep ms milliseconds. */
void sandlot__cg_sleep_ms(unsigned ms);
/* CPU quota/period in microseconds for cpus_milli thousandths of a CPU.
 * The kernel refuses quotas under 1 ms, so below 0.01 CPU the period grows
 * from 100 ms to 1 s (its maximum) instead. */
void sandlot__cg_cpu_quota(uint32_t cpus_milli, uint64_t *quota_us, uint64_t *period_us);
/* Whether the directory was made less than secs seconds ago (or cannot be
 * examined, which counts as young: leave it alone).  Never with secs 0. */
bool sandlot__cg_young(const char *dir, unsigned secs);
/* Whether the cgroup (any directory of it) holds no process; lists
 * cgroup.procs.  A directory that is gone counts as empty. */
bool sandlot__cg_dir_empty(const char *dir);

#endif
