/* A sandbox's writable storage: /home/user and /tmp live on it, and its
 * size is the --disk quota.
 *
 * Default ("pool"): one storage pool per data directory, and a directory
 * (a btrfs subvolume) per sandbox in it under a quota of --disk bytes.
 *
 *   <data-dir>/storage/pool.img   the pool: a btrfs filesystem in a file that
 *                                 is fully allocated (fallocate, never sparse)
 *   <data-dir>/storage/pool.lock  taken shared to make or remove a workspace,
 *                                 exclusively to mount, grow or sweep the pool;
 *                                 its byte 0 (an OFD lock) guards `reserved`
 *   <data-dir>/storage/mnt/       where the pool is mounted (once, on a loop
 *                                 device that clears itself when unmounted;
 *                                 nosuid, nodev, noexec, under the root-only
 *                                 data directory), holding:
 *       ws/<id>/                  a running sandbox's ephemeral workspace
 *       kept/<name>/              a kept workspace (pause, snapshots)
 *       reserved                  the sum of every workspace's quota
 *
 * Why this shape (measured on the 2-CPU test host, bench/storage.py):
 *   - set-up and tear-down.  A subvolume, its quota and home/ + tmp/ cost
 *     about 0.1 ms, deleting it 0.03 ms (the kernel frees its blocks in the
 *     background); the former image per sandbox (template copy, loop device,
 *     ext4 mount, unmount and detach) cost milliseconds, and writing back
 *     the dirty pages of a workspace that is about to be deleted on top.
 *   - a full host.  The pool's blocks are all allocated when it is made or
 *     grown, so nothing a sandbox writes needs space from the data
 *     filesystem any more: a full host cannot make the pool lose a write.
 *     (Sparse images could: their writes failed in writeback, silently,
 *     and left ext4 corrupt.)
 *   - a full pool.  Only possible with an overcommit ratio above 1; then it
 *     is one filesystem that is full, and the writer gets ENOSPC from
 *     write(), as on any full disk; nobody's written data is lost.
 *   - admission.  Every workspace's quota is reserved in `reserved`; a new
 *     one is admitted only if the sum stays within ratio × the pool's usable
 *     size, and the pool grows (fallocate, loop capacity, online resize) to
 *     make room only as far as the data filesystem really has free space.
 *   - snapshots.  from_snapshot is a btrfs snapshot: O(1), whatever the
 *     size of the workspace; pause costs nothing (the directory stays).
 *   - why btrfs.  Per-directory quotas need XFS or ext4 project quotas or
 *     btrfs quota groups.  The kernels sandlot is tested on (6.18 built
 *     without CONFIG_XFS_QUOTA and without CONFIG_QFMT_V2) have only the
 *     last.  Its one visible difference: a write past the quota fails with
 *     EDQUOT ("Disk quota exceeded"), not ENOSPC, and df shows the pool.
 *
 * Ownership across uid ranges: workspaces store *sandbox* uids (0 for
 * root, 1000 for the user), and the host shows one to its sandbox through
 * an idmapped mount (a detached clone of its directory, mount_setattr
 * MOUNT_ATTR_IDMAP with the sandbox's user namespace), so the same
 * directory serves any later sandbox whatever its host uid range.
 *
 * In use: every workspace has a lock file (.lock, outside what the sandbox
 * sees) that its holder keeps locked — the creating process and, through an
 * inherited descriptor, the sandbox's init — so the kernel drops the lock
 * when both are gone, even after SIGKILL.  A locked workspace is never
 * removed or copied; an ephemeral one whose lock is free is an orphan of a
 * killed process and is removed by the next sweep.
 *
 * Fallback ("tmpfs"): init mounts a tmpfs of the given size itself.  Its
 * pages count against the sandbox's memory limit.
 */
#ifndef SANDLOT_LINUX_STORAGE_H
#define SANDLOT_LINUX_STORAGE_H

#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

#define SANDLOT_WORKSPACE_NAME_MAX 64

struct sandlot_storage {
	sandlot_storage_t kind;  /* SANDLOT_STORAGE_POOL or _TMPFS */
	int mount_fd;            /* detached mount of the workspace, -1 for tmpfs */
	int lock_fd;             /* the workspace's lock (held), -1 for tmpfs */
	uint64_t bytes;          /* the quota */
	int ephemeral;           /* removed by sandlot__storage_destroy() */
	char name[SANDLOT_WORKSPACE_NAME_MAX + 1];
	char *data_dir;          /* owned */
};

/* Prepare storage of `bytes` for sandbox `id`.  `want` is
 * SANDLOT_STORAGE_POOL or _TMPFS, or 0 for the default: the pool, unless
 * SANDLOT_STORAGE=tmpfs is set.  For the pool, `keep` names a kept
 * workspace to use (created, `bytes` big, when missing; used as it is
 * otherwise: its quota is then its own, whatever `bytes` says; EBUSY while
 * another sandbox uses it), or is NULL for an ephemeral one.  A new
 * workspace is admitted against the pool (ENOSPC with a message saying how
 * much could be reserved); `overcommit` is the operator's ratio (>= 1).
 * Or'ed into `want`, SANDLOT_STORAGE_EXISTING takes only a kept workspace
 * that exists (ENOENT otherwise: a resume never starts on a fresh one).
 * Call sandlot__storage_idmap() once the sandbox's user namespace exists
 * and before its init attaches the mount.  On failure *out holds nothing. */
#define SANDLOT_STORAGE_EXISTING 0x100
int sandlot__storage_create(const char *data_dir, const char *id, uint64_t bytes, int want,
			    const char *keep, double overcommit, struct sandlot_storage *out,
			    sandlot_error_t **err);
/* Make the mount show the workspace's sandbox uids through the user
 * namespace of `pid` (the sandbox's init, its maps written).  No-op for
 * tmpfs. */
int sandlot__storage_idmap(struct sandlot_storage *s, pid_t pid, sandlot_error_t **err);
/* Close the host's handle on the mount (init has attached it).  Idempotent. */
void sandlot__storage_release(struct sandlot_storage *s);
/* After the sandbox is gone: drop the lock and, for an ephemeral workspace,
 * delete it and its reservation.  Never fails (a workspace that cannot be
 * deleted now is left to the sweep); idempotent. */
void sandlot__storage_destroy(struct sandlot_storage *s);

/* Kept workspaces, by name ([a-z0-9][a-z0-9_.-]*, up to 64 characters). */
int sandlot__workspace_name_check(const char *name, sandlot_error_t **err);
/* A snapshot of `src` as the new kept workspace `dst` (EEXIST if it
 * exists), admitted like a new workspace of src's quota; dst appears
 * complete or not at all.  EBUSY while a sandbox uses src. */
int sandlot__workspace_copy(const char *data_dir, const char *src, const char *dst,
			    double overcommit, sandlot_error_t **err);
/* Delete a kept workspace and its reservation.  ENOENT if there is none,
 * EBUSY while a sandbox uses it. */
int sandlot__workspace_remove(const char *data_dir, const char *name, sandlot_error_t **err);
/* The quota of a kept workspace.  ENOENT if there is none. */
int sandlot__workspace_size(const char *data_dir, const char *name, uint64_t *bytes,
			    sandlot_error_t **err);
/* The names of the kept workspaces (a NULL-terminated array the caller
 * frees, strings and array).  An empty list when there is no pool. */
int sandlot__workspace_list(const char *data_dir, char ***names, sandlot_error_t **err);
/* Make kept workspaces durable (syncfs of the pool).  A no-op without a
 * pool. */
int sandlot__workspace_sync(const char *data_dir, sandlot_error_t **err);
/* Bring a workspace image of the former layout (an ext4 image file whose
 * home/ and tmp/ store sandbox uids) into the pool as the kept workspace
 * `name`, of the image's size.  The image is only read (mounted read-only,
 * nosuid, nodev, noexec, never attached to the host's tree); the caller
 * deletes it afterwards.  On failure no workspace `name` is left. */
int sandlot__workspace_import(const char *data_dir, const char *name, const char *image,
			      double overcommit, sandlot_error_t **err);

/* Write the kept workspace `name` to out_fd as a POSIX tar of its home/ and
 * tmp/ (sandbox uids as numbers, user.* extended attributes), holding its
 * lock shared (EBUSY while a sandbox uses it). */
int sandlot__workspace_export(const char *data_dir, const char *name, int out_fd,
			      sandlot_error_t **err);
/* Make the new kept workspace `name` (EEXIST if it exists) with a quota of
 * `bytes`, admitted like any new one, from such a tar read from in_fd.  It
 * appears complete or not at all (EDQUOT when the files do not fit). */
int sandlot__workspace_import_tar(const char *data_dir, const char *name, uint64_t bytes,
				  int in_fd, double overcommit, sandlot_error_t **err);

/* The pool as a whole. */
struct sandlot_pool_info {
	uint64_t size;       /* bytes of the pool file */
	uint64_t usable;     /* what quotas may add up to with no overcommit */
	uint64_t reserved;   /* what they add up to */
};
int sandlot__pool_info(const char *data_dir, struct sandlot_pool_info *out, sandlot_error_t **err);
/* Grow the pool (making it if needed) to at least `bytes`.  ENOSPC if the
 * data filesystem does not have the room. */
int sandlot__pool_grow(const char *data_dir, uint64_t bytes, sandlot_error_t **err);
/* Unmount the pool (its loop device then detaches itself); while sandboxes
 * still use it, detach it from the host's tree instead (their mounts keep it
 * until they end).  0 also when there was none mounted. */
int sandlot__pool_unmount(const char *data_dir, sandlot_error_t **err);
/* Free space on the filesystem of `dir` that sandlot may take: what is
 * available beyond what it keeps free for the host itself (*keep: 1 % of
 * the filesystem, at least 128 MiB).  The storage pool grows into it and vm
 * disks are reserved in it.  -1 with errno (statvfs). */
int sandlot__host_room(const char *dir, uint64_t *room, uint64_t *keep);
/* `v` as "1.5G" for messages, in buf. */
const char *sandlot__human_bytes(uint64_t v, char buf[32]);
/* Remove ephemeral workspaces whose process was killed, and half-made
 * kept ones; recount the reservations.  Quiet; a no-op without a pool. */
void sandlot__pool_sweep(const char *data_dir);

#endif
