/* The /etc of a sandbox: the files sandlot writes itself and the host
 * entries it shows.  Shared by the host (which prepares the root tree, see
 * src/backend/ns-root.c) and sandlot-init (which builds the root itself
 * where the host could not); libc only, so sandlot-init links it
 * statically.
 */
#ifndef SANDLOT_COMMON_ETCFILES_H
#define SANDLOT_COMMON_ETCFILES_H

#include <stddef.h>
#include <stdint.h>

/* Host /etc entries bound read-only into a sandbox on the host image: only
 * entries that hold no secrets and that programs need to run. */
extern const char *const sandlot__etc_allow[];
extern const size_t sandlot__etc_allow_count;

/* The files sandlot writes: passwd, group, nsswitch.conf, resolv.conf,
 * hosts, hostname. */
extern const char *const sandlot__etc_generated[];
extern const size_t sandlot__etc_generated_count;

struct sandlot_etc {
	const char *hostname;
	const char *user_name;   /* login name of the sandbox user */
	unsigned uid, gid;       /* its ids */
	/* A built image's /etc: its other users and groups are kept (so its
	 * files show their owners' names).  -1 for the host image. */
	int image_etc_fd;
	/* The resolver resolv.conf names, an IPv4 address as a number (a VM
	 * guest's); 0: 127.0.0.1, where an ns sandbox's DNS listener is. */
	uint32_t nameserver;
};

/* Write every generated file into the directory `dirfd` (created 0644,
 * never through a symlink).  0, or -1 with errno set and *what naming the
 * file that could not be written. */
int sandlot__etc_write(int dirfd, const struct sandlot_etc *e, const char **what);

#endif
