/* The ns backend's way of attaching a built image: a detached mount.
 *
 * Core resolves the image, holds it in use and reads its config
 * (src/core/images.h); how a sandbox sees its files is the backend's
 * business.  Here: a read-only clone of images/<digest>/rootfs as a mount
 * of its own, attached nowhere on the host, which init attaches in the
 * sandbox's mount namespace.  (A VM backend attaches the image's erofs
 * file as a read-only disk instead.)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mount.h>
#include <unistd.h>

#include "ns.h"
#include "common/cleanup.h"
#include "core/images.h"
#include "linux/syscalls.h"

int sandlot__ns_image_mount(const char *data_dir, const char *digest, sandlot_error_t **err)
{
	char path[4200];
	if ((size_t)snprintf(path, sizeof(path), "%s/images/%s/rootfs", data_dir, digest) >=
	    sizeof(path))
		return sandlot__error(err, ENAMETOOLONG, "data directory path too long");
	/* A clone of the directory as a mount of its own, attached nowhere:
	 * the sandbox's init attaches it in its own namespace, so the data
	 * directory (mode 0700, unreachable for sandbox uids) is never walked
	 * from inside, and nothing is mounted on the host. */
	int fd = sys_open_tree(AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
	if (fd < 0)
		return sandlot__error_errno(err, errno, "clone image root %s", path);
	struct mount_attr attr = {
		.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
	};
	if (sys_mount_setattr(fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) < 0) {
		int e = errno;
		close(fd);
		return sandlot__error_errno(err, e, "make image root %s read-only", path);
	}
	return fd;
}

void sandlot__ns_image_idmap(int fd, pid_t pid)
{
	if (fd < 0)
		return;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
	cleanup_close int ns = open(path, O_RDONLY | O_CLOEXEC);
	if (ns < 0)
		return;
	struct mount_attr attr = { .attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (uint64_t)ns };
	if (sys_mount_setattr(fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) < 0) {
		/* EINVAL/EOPNOTSUPP: the filesystem cannot be idmapped.  Owners
		 * then show as the overflow uid; permissions still apply. */
	}
}
