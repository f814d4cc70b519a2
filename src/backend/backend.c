#include "backend.h"

#include <errno.h>
#include <string.h>

const struct sandlot_backend_ops *const sandlot__backends[] = {
	&sandlot__backend_ns, &sandlot__backend_vm, NULL,
};

const struct sandlot_backend_ops *sandlot__backend_for(const sandlot_options_t *opts,
						       sandlot_error_t **err)
{
	/* "host" and built images run under either; whether a built image
	 * exists is checked by sandlot_options_validate(), whether it has a
	 * VM root by the vm backend's start. */
	switch (opts->isolation) {
	case SANDLOT_ISOLATION_NS:
		return &sandlot__backend_ns;
	case SANDLOT_ISOLATION_VM:
		return &sandlot__backend_vm;
	}
	sandlot__error(err, EINVAL, "unknown isolation %d: expected ns (0) or vm (1)",
		       (int)opts->isolation);
	return NULL;
}
