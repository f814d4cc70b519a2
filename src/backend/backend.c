#include "backend.h"

#include <errno.h>
#include <string.h>

const struct sandlot_backend_ops *const sandlot__backends[] = { &sandlot__backend_ns, NULL };

const struct sandlot_backend_ops *sandlot__backend_for(const char *image, sandlot_error_t **err)
{
	/* "host" and built images (directories in the image store) both run
	 * as namespace sandboxes; whether a built image exists is checked by
	 * sandlot_options_validate(). */
	(void)image;
	(void)err;
	return &sandlot__backend_ns;
}
