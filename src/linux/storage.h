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

enum sandlot_storage_kind { SANDLOT_STORAGE_EXT4, SANDLOT_STORAGE_TMPFS };

struct sandlot_storage {
	enum sandlot_storage_kind kind;
	int mount_fd;        /* detached mount (ext4), -1 for tmpfs */
	uint64_t bytes;
};

/* Prepare storage of `bytes` for sandbox `id` whose uid 0 maps to host uid
 * `base`: home/ owned by the sandbox user (uid 1000), tmp/ mode 1777.
 * SANDLOT_STORAGE=tmpfs in the environment forces the fallback. */
int sandlot__storage_create(const char *data_dir, const char *id, uint64_t bytes, uid_t base,
			    struct sandlot_storage *out, sandlot_error_t **err);
/* Drop the host's reference (close the mount fd).  Idempotent. */
void sandlot__storage_release(struct sandlot_storage *s);

#endif
