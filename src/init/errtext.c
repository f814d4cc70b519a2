/*
 * The text of an errno value, as the host's C library words it.
 *
 * sandlot-init is linked against musl where it can be (meson.build says
 * why), and musl words some errors differently from glibc: EDQUOT is
 * "Quota exceeded" there, "Disk quota exceeded" here.  Init's messages
 * reach users through the API and the CLI next to messages the host
 * formats itself, so one error must read the same whichever library
 * built init.  The values whose wording differs are listed here; every
 * other one is strerror()'s, which agree.
 */
#include <errno.h>
#include <string.h>

#include "init.h"

const char *init__strerror(int err)
{
	switch (err) {
	case EDQUOT: return "Disk quota exceeded";
	case ELOOP: return "Too many levels of symbolic links";
	case ENAMETOOLONG: return "File name too long";
	case EXDEV: return "Invalid cross-device link";
	case EMFILE: return "Too many open files";
	case ENOMEM: return "Cannot allocate memory";
	case EBUSY: return "Device or resource busy";
	case EIO: return "Input/output error";
	case EOVERFLOW: return "Value too large for defined data type";
	case ETIMEDOUT: return "Connection timed out";
	case EOPNOTSUPP: return "Operation not supported";
	case ENOTTY: return "Inappropriate ioctl for device";
	case ETXTBSY: return "Text file busy";
	default: return strerror(err);
	}
}
