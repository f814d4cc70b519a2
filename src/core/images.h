/* The image store: built root filesystems under <data-dir>/images.
 *
 *   images/<digest>/rootfs         the root filesystem (owned by host root,
 *                                  never modified after the build)
 *   images/<digest>/manifest.json  what went in: recipe, packages, digest
 *   images/<digest>/config         what a sandbox on it needs at start-up,
 *                                  one "KEY VALUE" per line: env K=V,
 *                                  workdir DIR, user NAME
 *   images/<digest>/lock           in-use lock (below)
 *   images/names/<name>            symlink to ../<digest>
 *   images/.build-XXXXXX           a build in progress (sandlot image build)
 *
 * <digest> is 64 lowercase hex digits: the SHA-256 of the file tree (see
 * docs/images.md for exactly what it covers).  A reference to an image is
 * its name, or its digest or a unique prefix of it (12 digits or more,
 * optionally "sha256:"-prefixed); "host" is the host's own /usr, which is
 * not in the store.
 *
 * In-use lock: every sandbox on an image holds a shared flock on its lock
 * file, from before its root is mounted until the sandbox is destroyed;
 * `sandlot image rm` takes it exclusively without waiting, so it is refused
 * while any sandbox uses the image.  The kernel drops a flock when its
 * holder dies, so a crashed sandlot leaves no stale "in use".
 *
 * This side is the same for every backend: which image, held in use, and
 * what its config says.  How a sandbox sees the image's files is its
 * backend's (backend.h): the ns backend attaches a detached read-only
 * clone of rootfs (src/backend/ns-image.c), a VM backend a read-only disk.
 */
#ifndef SANDLOT_CORE_IMAGES_H
#define SANDLOT_CORE_IMAGES_H

#include <sys/types.h>

#include "common/error.h"

#define SANDLOT_DIGEST_HEX 64

struct sandlot_image {
	char digest[SANDLOT_DIGEST_HEX + 1];
	int lock_fd;     /* shared flock on images/<digest>/lock; -1 when closed */
	char **env;      /* "K=V" from the config, NULL-terminated (never NULL once open) */
	char *workdir;   /* or NULL */
	char *user;      /* login name of the sandbox user, or NULL */
};

/* Whether `name` is a valid image name: [a-z0-9][a-z0-9._-]*, at most 64
 * characters, not "host", not 12+ hex digits (those read as digests). */
int sandlot__image_name_valid(const char *name);

/* The data directory in effect for `given` (options), $SANDLOT_DATA_DIR, or
 * /var/lib/sandlot.  Returns a pointer to one of those strings. */
const char *sandlot__data_dir(const char *given);

/* Resolve a reference (see above) to a digest, writing 65 bytes to
 * `digest`.  ENOENT naming the reference when there is no such image,
 * EINVAL when a prefix is ambiguous.  "host" is not resolved (ENOENT). */
int sandlot__image_resolve(const char *data_dir, const char *ref, char *digest,
			   sandlot_error_t **err);

/* Resolve `ref`, take the shared in-use lock and read the config.  On
 * failure *img is left closed (safe to release). */
int sandlot__image_open(const char *data_dir, const char *ref, struct sandlot_image *img,
			sandlot_error_t **err);

/* Close everything and free; the lock goes with the fd.  Idempotent. */
void sandlot__image_release(struct sandlot_image *img);

#endif
