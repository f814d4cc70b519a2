/* Per-sandbox host uid ranges for user namespaces.
 *
 * Every sandbox gets 65536 host uids/gids of its own, never host root:
 * slot N maps sandbox uid 0..65535 to host uid SANDLOT_UID_BASE + N*65536.
 * A slot is held by an open-file-description lock on byte N of
 * /run/sandlot/uid-slots.lock (one per host; <data_dir>/uid-slots.lock only
 * where /run/sandlot cannot be created), so concurrent `sandlot run`s and the daemon
 * never share a range, and a slot is released automatically when its holder
 * exits — even by SIGKILL.  The holder keeps the locked description through
 * a socket rather than a descriptor of the lock file (userns.c, park()).
 */
#ifndef SANDLOT_LINUX_USERNS_H
#define SANDLOT_LINUX_USERNS_H

#include <sys/types.h>

#include "common/error.h"

#define SANDLOT_UID_BASE 0x10000000u
#define SANDLOT_UID_RANGE 65536u
#define SANDLOT_UID_SLOTS 4096u

struct sandlot_uid_slot {
	int lock_fd;     /* holds the lock (a socket, or the lock file); -1 when not held */
	unsigned slot;
	uid_t base;      /* host uid of sandbox uid 0 */
};

/* Take a free slot.  Fails with EAGAIN when all are in use. */
int sandlot__uid_slot_acquire(const char *data_dir, struct sandlot_uid_slot *out,
			      sandlot_error_t **err);
void sandlot__uid_slot_release(struct sandlot_uid_slot *s);

/* Write uid_map and gid_map of `pid` ("0 base 65536").  The caller is host
 * root; setgroups stays allowed so the child can drop supplementary groups. */
int sandlot__userns_write_maps(pid_t pid, uid_t base, sandlot_error_t **err);

#endif
