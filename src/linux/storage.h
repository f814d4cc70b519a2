/* A sandbox's writable storage: /home/user and /tmp live on it, and its
 * size is the --disk quota.
 *
 * Default ("ext4"): a sparse image file holding an ext4 filesystem, attached
 * to a loop device with autoclear and mounted as a *detached* mount
 * (fsmount), which the sandbox's init attaches inside its own mount
 * namespace.  The host never has it mounted anywhere, so when the last
 * process of the sandbox dies the mount, the loop device and (for
 * ephemeral storage, whose image is unlinked right after attaching) the
 * image file all go away by themselves: a crashed or SIGKILLed host leaves
 * nothing behind.  Writes past the size fail with ENOSPC inside; the host's
 * disk gets at most `bytes` of data from it.
 *
 * Kept ("workspace image", sandlot_options_t.workspace_image): the same
 * ext4 storage in a file that is never unlinked, so that a later sandbox
 * (another uid range, often another process) can mount it again and find
 * /home/user and /tmp byte for byte.  Ownership across uid ranges: such an
 * image stores *sandbox* uids (0 for root, 1000 for the user), and the host
 * shows it to the sandbox through an idmapped mount (mount_setattr
 * MOUNT_ATTR_IDMAP with the sandbox's own user namespace, which maps
 * sandbox uid u to host uid base + u).  The on-disk owners never change,
 * whatever range the next sandbox gets: reuse costs one system call instead
 * of a recursive chown of the whole tree (measured on the 2-CPU test host:
 * 0.5 s for 100,000 files with a warm cache, 1.5 s cold), and an image is
 * never left half re-owned by a crash.  Ephemeral
 * images keep storing host uids (base + u) and need no idmap.
 * One sandbox at a time: an exclusive flock on the image's open file
 * description, which the loop device holds for as long as it is attached,
 * so the kernel drops it when the sandbox's last mount of it goes — even
 * when everything was SIGKILLed.
 *
 * Fallback ("tmpfs"): where loop devices are not available, init mounts a
 * tmpfs of the given size itself.  Its pages count against the sandbox's
 * memory limit.
 */
#ifndef SANDLOT_LINUX_STORAGE_H
#define SANDLOT_LINUX_STORAGE_H

#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

struct sandlot_storage {
	sandlot_storage_t kind;     /* SANDLOT_STORAGE_EXT4 or _TMPFS */
	int mount_fd;        /* detached mount (ext4), -1 for tmpfs */
	uint64_t bytes;      /* the quota: the image's size for a kept image */
	int idmapped;        /* kept image: stores sandbox uids, needs the idmap */
};

/* Prepare storage of `bytes` for sandbox `id` whose uid 0 maps to host uid
 * `base`: home/ owned by the sandbox user (uid 1000), tmp/ mode 1777.
 * `want` is SANDLOT_STORAGE_EXT4 or _TMPFS, or 0 for the default: ext4,
 * unless SANDLOT_STORAGE=tmpfs is set or the host has no loop devices.
 * Asking for ext4 explicitly on a host without loop devices fails.
 *
 * With `keep` (a path), the storage is that kept image: created from the
 * template (`bytes` big) when missing — complete or not at all — and used
 * as it is otherwise (its size is then the quota, whatever `bytes` says);
 * always ext4; EBUSY while another sandbox uses it.  out->idmapped is set:
 * call sandlot__storage_idmap() once the sandbox's user namespace exists
 * and before its init attaches the mount. */
int sandlot__storage_create(const char *data_dir, const char *id, uint64_t bytes, uid_t base,
			    int want, const char *keep, struct sandlot_storage *out,
			    sandlot_error_t **err);
/* Kept images only (a no-op otherwise): make the mount show the image's
 * sandbox uids through the user namespace of `pid` (the sandbox's init,
 * its maps written).  Fails where the kernel cannot idmap ext4 mounts
 * (before Linux 5.12). */
int sandlot__storage_idmap(struct sandlot_storage *s, pid_t pid, sandlot_error_t **err);
/* Copy the image at `src` to the new file `dst` (which must not exist),
 * allocated ranges only, under a temporary name renamed into place: dst
 * appears complete or not at all.  EBUSY if a sandbox is using src. */
int sandlot__storage_copy(const char *src, const char *dst, sandlot_error_t **err);
/* Drop the host's reference (close the mount fd).  Idempotent. */
void sandlot__storage_release(struct sandlot_storage *s);

#endif
