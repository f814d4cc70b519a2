/* Kept workspaces: the public side of src/linux/storage.c's kept images. */
#include "internal.h"

#include <errno.h>

#include "linux/storage.h"

int sandlot_workspace_copy(const char *src, const char *dst, sandlot_error_t **err)
{
	if (!src || !*src || !dst || !*dst)
		return sandlot__error(err, EINVAL, "workspace copy: empty image path");
	return sandlot__storage_copy(src, dst, err);
}
