/* Libraries loaded on first use (see lazylib.h). */
#include "common/lazylib.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

static int load(struct sandlot_lazylib *l)
{
	/* RTLD_LOCAL: nothing else in the process binds to their symbols by
	 * accident.  RTLD_NOW: a missing symbol is found here, not in the
	 * middle of a call. */
	void *h = dlopen(l->soname, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(l->msg, sizeof(l->msg), "%s", e ? e : "dlopen failed");
		return -1;
	}
	void *found[64];
	if (l->nsyms > sizeof(found) / sizeof(found[0])) {
		snprintf(l->msg, sizeof(l->msg), "%s: too many symbols", l->soname);
		dlclose(h);
		return -1;
	}
	for (size_t i = 0; i < l->nsyms; i++) {
		dlerror();
		found[i] = dlsym(h, l->syms[i].name);
		if (!found[i]) {
			snprintf(l->msg, sizeof(l->msg), "%s has no %s", l->soname, l->syms[i].name);
			dlclose(h);
			return -1;
		}
	}
	for (size_t i = 0; i < l->nsyms; i++)
		*l->syms[i].slot = found[i];
	return 0;
}

int sandlot__lazylib_load(struct sandlot_lazylib *l, sandlot_error_t **err)
{
	int state = __atomic_load_n(&l->state, __ATOMIC_ACQUIRE);
	if (state == 0) {
		pthread_mutex_lock(&l->lock);
		if (l->state == 0)
			__atomic_store_n(&l->state, load(l) == 0 ? 1 : -1, __ATOMIC_RELEASE);
		state = l->state;
		pthread_mutex_unlock(&l->lock);
	}
	if (state > 0)
		return 0;
	return sandlot__error(err, ENOTSUP, "%s: needs %s, which cannot be loaded: %s", l->purpose,
			      l->soname, l->msg);
}
