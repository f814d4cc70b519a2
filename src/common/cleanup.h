/* Scope-bound cleanup helpers.
 *
 *   cleanup_free char *buf = malloc(n);     // freed when buf leaves scope
 *   cleanup_close int fd = open(...);       // closed when fd leaves scope (if >= 0)
 *   return steal_fd(&fd);                   // hand ownership to the caller
 *
 * steal_pointer()/steal_fd() return the value and reset the variable so the
 * cleanup does nothing.  These helpers preserve errno.
 */
#ifndef SANDLOT_COMMON_CLEANUP_H
#define SANDLOT_COMMON_CLEANUP_H

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline void sandlot__freep(void *p)
{
	int saved = errno;
	free(*(void **)p);
	errno = saved;
}

static inline void sandlot__closep(int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		close(*fd);
		errno = saved;
	}
}

static inline void sandlot__fclosep(FILE **f)
{
	if (*f) {
		int saved = errno;
		fclose(*f);
		errno = saved;
	}
}

static inline void sandlot__closedirp(DIR **d)
{
	if (*d) {
		int saved = errno;
		closedir(*d);
		errno = saved;
	}
}

#define cleanup_free __attribute__((cleanup(sandlot__freep)))
#define cleanup_close __attribute__((cleanup(sandlot__closep)))
#define cleanup_fclose __attribute__((cleanup(sandlot__fclosep)))
#define cleanup_closedir __attribute__((cleanup(sandlot__closedirp)))

static inline void *sandlot__steal_pointer(void *pp)
{
	void **p = pp;
	void *v = *p;
	*p = NULL;
	return v;
}
#define steal_pointer(pp) sandlot__steal_pointer(pp)

static inline int steal_fd(int *fd)
{
	int v = *fd;
	*fd = -1;
	return v;
}

#define SANDLOT_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif
