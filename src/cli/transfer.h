/* Host <-> sandbox copies for `sandlot run --upload/--download`. */
#ifndef SANDLOT_CLI_TRANSFER_H
#define SANDLOT_CLI_TRANSFER_H

#include "sandlot.h"
#include "common/error.h"

struct transfer {
	char *local;
	char *remote;   /* relative paths are under /home/user */
};

/* Parse "A:B" (upload: LOCAL:REMOTE, download: REMOTE:LOCAL).  A missing
 * second half, or one ending in '/', takes the first half's base name.
 * Returns -1 with errno EINVAL for an empty half, ENOMEM on allocation. */
int transfer_parse(const char *spec, int upload, struct transfer *out);
void transfer_free(struct transfer *t);

/* Copy a file or a directory tree (regular files and directories only;
 * symlinks and special files are skipped with a warning). */
int transfer_upload(sandlot_t *sb, const struct transfer *t, sandlot_error_t **err);
/* Download atomically: each file goes to a temporary name first. */
int transfer_download(sandlot_t *sb, const struct transfer *t, sandlot_error_t **err);

#endif
