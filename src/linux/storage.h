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
	uint64_t bytes;
};

/* Prepare storage of `bytes` for sandbox `id` whose uid 0 maps to host uid
 * `base`: home/ owned by the sandbox user (uid 1000), tmp/ mode 1777.
 * `want` is SANDLOT_STORAGE_EXT4 or _TMPFS, or 0 for the default: ext4,
 * unless SANDLOT_STORAGE=tmpfs is set or the host has no loop devices.
 * Asking for ext4 explicitly on a host without loop devices fails. */
int sandlot__storage_create(const char *data_dir, const char *id, uint64_t bytes, uid_t base,
			    int want, struct sandlot_storage *out, sandlot_error_t **err);
/* Drop the host's reference (close the mount fd).  Idempotent. */
void sandlot__storage_release(struct sandlot_storage *s);

#endif
