#include "backend.h"

#include <errno.h>
#include <string.h>

const struct sandlot_backend_ops *sandlot__backend_for(const char *image, sandlot_error_t **err)
{
	if (!image || strcmp(image, "host") == 0)
		return &sandlot__backend_ns;
	sandlot__error(err, ENOENT, "unknown image \"%s\" (available: host)", image);
	return NULL;
}
