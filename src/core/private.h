/* Functions of libsandlot that are not part of its public API (sandlot.h):
 * for sandlotd and the tests, which link the static library.  They are not
 * exported from libsandlot.so, and they may change at any time.
 *
 * Backend details live here rather than in sandlot.h: a sandbox of another
 * backend need not have a host process for its init at all.
 */
#ifndef SANDLOT_CORE_PRIVATE_H
#define SANDLOT_CORE_PRIVATE_H

#include <sys/types.h>

#include "sandlot.h"

/* Host pid of the sandbox's init (ns backend: a child of the creating
 * process), for diagnostics and tests; 0 when there is none. */
pid_t sandlot__init_pid(const sandlot_t *sb);

/* From now on, load sandboxes' egress rules through a helper process
 * whose descriptors stay few (src/linux/netns.h says why): for a process
 * that may hold a thousand descriptors or more.  Call it while the
 * process has one thread. */
int sandlot__nft_helper_start(sandlot_error_t **err);

#endif
