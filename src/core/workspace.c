/* Kept workspaces and the storage pool: the public side of what each
 * backend keeps (backend.h), asked through its table. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/sized.h"
#include "linux/storage.h"

/* The caller's options as this library's struct (sized.h), in *buf; NULL
 * stays NULL (the defaults). */
static int norm(const sandlot_options_t **opts, sandlot_options_t *buf, sandlot_error_t **err)
{
	if (!*opts)
		return 0;
	if (sandlot__options_copy(*opts, buf, err) < 0)
		return -1;
	*opts = buf;
	return 0;
}

static const char *dir_of(const sandlot_options_t *opts)
{
	return sandlot__data_dir(opts ? opts->data_dir : NULL);
}

/* $SANDLOT_DISK_OVERCOMMIT: 0 and *out = 1 when unset, -1 when it is not a
 * ratio from 1 to 1000. */
static int overcommit_env(double *out)
{
	const char *env = getenv("SANDLOT_DISK_OVERCOMMIT");
	*out = 1;
	if (!env || !*env)
		return 0;
	char *end;
	errno = 0;
	double v = strtod(env, &end);
	if (*end || errno || !(v >= 1 && v <= 1000))
		return -1;
	*out = v;
	return 0;
}

int sandlot__overcommit_check(const sandlot_options_t *opts, sandlot_error_t **err)
{
	double v;
	if (opts->disk_overcommit != 0 &&
	    !(opts->disk_overcommit >= 1 && opts->disk_overcommit <= 1000))
		return sandlot__error(err, EINVAL,
				      "disk overcommit ratio %g is out of range: 1 to 1000 (0: default)",
				      opts->disk_overcommit);
	if (opts->disk_overcommit == 0 && overcommit_env(&v) < 0)
		return sandlot__error(err, EINVAL,
				      "invalid SANDLOT_DISK_OVERCOMMIT=\"%.40s\": expected a ratio from 1 "
				      "to 1000, e.g. 1.5", getenv("SANDLOT_DISK_OVERCOMMIT"));
	return 0;
}

double sandlot__overcommit(const sandlot_options_t *opts)
{
	if (opts && opts->disk_overcommit >= 1)
		return opts->disk_overcommit;
	double v;
	return overcommit_env(&v) == 0 ? v : 1;
}

/* Kept workspaces by name: a name alone does not say which backend keeps
 * it, so each is asked in turn (backend.h).  The first that has `name`:
 * its ops, with *bytes its size; NULL with ENOENT when none has. */
static const struct sandlot_backend_ops *keeper_of(const char *data_dir, const char *name,
						   uint64_t *bytes, sandlot_error_t **err)
{
	sandlot_error_t *none = NULL; /* the first backend's ENOENT, to pass on */
	for (const struct sandlot_backend_ops *const *b = sandlot__backends; *b; b++) {
		if (!(*b)->workspace_size)
			continue;
		sandlot_error_t *e = NULL;
		if ((*b)->workspace_size(data_dir, name, bytes, &e) == 0) {
			sandlot_error_free(none);
			return *b;
		}
		if (sandlot_error_status(e) != ENOENT) {
			sandlot_error_free(none);
			none = e;
			break;
		}
		if (none)
			sandlot_error_free(e);
		else
			none = e;
	}
	if (!none)
		sandlot__error(&none, ENOENT, "no kept workspace %s", name);
	if (err)
		*err = none;
	else
		sandlot_error_free(none);
	return NULL;
}

/* The backend whose workspaces are in the data directory's storage pool
 * (ns): the first with storage_info. */
static const struct sandlot_backend_ops *pool_keeper(const char *what, sandlot_error_t **err)
{
	for (const struct sandlot_backend_ops *const *b = sandlot__backends; *b; b++)
		if ((*b)->storage_info)
			return *b;
	sandlot__error(err, ENOTSUP, "%s: no backend keeps a storage pool", what);
	return NULL;
}

int sandlot_workspace_copy(const sandlot_options_t *opts, const char *src, const char *dst,
			   sandlot_error_t **err)
{
	sandlot_options_t o;
	if (norm(&opts, &o, err) < 0)
		return -1;
	if (sandlot__workspace_name_check(dst, err) < 0 ||
	    sandlot__workspace_name_check(src, err) < 0)
		return -1;
	uint64_t bytes;
	const struct sandlot_backend_ops *ops = keeper_of(dir_of(opts), src, &bytes, err);
	if (!ops)
		return -1;
	if (!ops->snapshot)
		return sandlot__error(err, ENOTSUP, "the %s backend cannot copy workspace %s",
				      ops->name, src);
	return ops->snapshot(dir_of(opts), src, dst, sandlot__overcommit(opts), err);
}

int sandlot_workspace_remove(const sandlot_options_t *opts, const char *name,
			     sandlot_error_t **err)
{
	sandlot_options_t o;
	if (norm(&opts, &o, err) < 0)
		return -1;
	if (sandlot__workspace_name_check(name, err) < 0)
		return -1;
	/* Every backend's (there is at most one of a name, unless a process
	 * was killed half-way through making one). */
	int found = 0;
	sandlot_error_t *none = NULL; /* the first backend's ENOENT, to pass on */
	for (const struct sandlot_backend_ops *const *b = sandlot__backends; *b; b++) {
		if (!(*b)->workspace_remove)
			continue;
		sandlot_error_t *e = NULL;
		if ((*b)->workspace_remove(dir_of(opts), name, &e) == 0) {
			found = 1;
			continue;
		}
		if (sandlot_error_status(e) != ENOENT) {
			sandlot_error_free(none);
			if (err)
				*err = e;
			else
				sandlot_error_free(e);
			return -1;
		}
		if (none)
			sandlot_error_free(e);
		else
			none = e;
	}
	if (found || !none) {
		sandlot_error_free(none);
		return found ? 0 : sandlot__error(err, ENOENT, "no kept workspace %s", name);
	}
	if (err)
		*err = none;
	else
		sandlot_error_free(none);
	return -1;
}

int sandlot_workspace_size(const sandlot_options_t *opts, const char *name, uint64_t *bytes,
			   sandlot_error_t **err)
{
	sandlot_options_t o;
	if (norm(&opts, &o, err) < 0)
		return -1;
	if (sandlot__workspace_name_check(name, err) < 0)
		return -1;
	return keeper_of(dir_of(opts), name, bytes, err) ? 0 : -1;
}

int sandlot_workspace_list(const sandlot_options_t *opts, char ***names, sandlot_error_t **err)
{
	sandlot_options_t o;
	if (norm(&opts, &o, err) < 0)
		return -1;
	char **all = calloc(1, sizeof(char *));
	size_t n = 0;
	if (!all)
		return sandlot__error(err, ENOMEM, "out of memory");
	for (const struct sandlot_backend_ops *const *b = sandlot__backends; *b; b++) {
		char **some = NULL;
		if (!(*b)->workspace_list)
			continue;
		if ((*b)->workspace_list(dir_of(opts), &some, err) < 0) {
			sandlot__strv_free(all);
			return -1;
		}
		size_t k = 0;
		while (some[k])
			k++;
		char **grown = realloc(all, (n + k + 1) * sizeof(char *));
		if (!grown) {
			sandlot__strv_free(some);
			sandlot__strv_free(all);
			return sandlot__error(err, ENOMEM, "out of memory");
		}
		all = grown;
		memcpy(all + n, some, k * sizeof(char *));
		n += k;
		all[n] = NULL;
		free(some); /* its strings are in all now */
	}
	*names = all;
	return 0;
}

int sandlot_workspace_sync(const sandlot_options_t *opts, sandlot_error_t **err)
{
	sandlot_options_t o;
	if (norm(&opts, &o, err) < 0)
		return -1;
	for (const struct sandlot_backend_ops *const *b = sandlot__backends; *b; b++)
		if ((*b)->workspace_sync && (*b)->workspace_sync(dir_of(opts), err) < 0)
			return -1;
	return 0;
}

int sandlot_workspace_import(const sandlot_options_t *opts, const char *name, const char *image,
			     sandlot_error_t **err)
{
	sandlot_options_t o;
	if (norm(&opts, &o, err) < 0)
		return -1;
	if (!image || !*image)
		return sandlot__error(err, EINVAL, "workspace import: empty image path");
	/* An image of the former layout is the ns backend's (its pool's). */
	const struct sandlot_backend_ops *ops = pool_keeper("workspace import", err);
	if (!ops)
		return -1;
	return ops->workspace_import(dir_of(opts), name, image, sandlot__overcommit(opts), err);
}

/* Archives are of the storage pool's workspaces, which the ns backend
 * keeps; a backend that keeps its own kind (a vm's disk and memory) says
 * it cannot. */
int sandlot_workspace_export(const sandlot_options_t *opts, const char *name, int fd,
			     sandlot_error_t **err)
{
	sandlot_options_t o;
	if (norm(&opts, &o, err) < 0)
		return -1;
	if (sandlot__workspace_name_check(name, err) < 0)
		return -1;
	if (fd < 0)
		return sandlot__error(err, EBADF, "workspace export: no file descriptor");
	uint64_t bytes;
	const struct sandlot_backend_ops *ops = keeper_of(dir_of(opts), name, &bytes, err);
	if (!ops)
		return -1;
	if (!ops->workspace_export)
		return sandlot__error(err, ENOTSUP, "the %s backend cannot archive workspace %s",
				      ops->name, name);
	return ops->workspace_export(dir_of(opts), name, fd, err);
}

int sandlot_workspace_import_tar(const sandlot_options_t *opts, const char *name, uint64_t bytes,
				 int fd, sandlot_error_t **err)
{
	sandlot_options_t o;
	if (norm(&opts, &o, err) < 0)
		return -1;
	if (fd < 0)
		return sandlot__error(err, EBADF, "workspace import: no file descriptor");
	if (sandlot__workspace_name_check(name, err) < 0)
		return -1;
	uint64_t have;
	sandlot_error_t *e = NULL;
	if (keeper_of(dir_of(opts), name, &have, &e)) {
		sandlot_error_free(e);
		return sandlot__error(err, EEXIST, "workspace %s already exists", name);
	}
	sandlot_error_free(e);
	/* Archives are of pool workspaces (sandlot_workspace_export). */
	const struct sandlot_backend_ops *ops = pool_keeper("workspace import", err);
	if (!ops)
		return -1;
	return ops->workspace_import_tar(dir_of(opts), name, bytes, fd, sandlot__overcommit(opts),
					 err);
}

void sandlot_strv_free(char **v)
{
	sandlot__strv_free(v);
}

int sandlot_storage_info(const sandlot_options_t *opts, sandlot_storage_info_t *out,
			 sandlot_error_t **err)
{
	sandlot_options_t o;
	if (norm(&opts, &o, err) < 0)
		return -1;
	if (sandlot__out_check("sandlot_storage_info_t", out, sizeof(*out), err) < 0)
		return -1;
	const struct sandlot_backend_ops *ops = pool_keeper("storage info", err);
	struct sandlot_pool_info pi;
	if (!ops || ops->storage_info(dir_of(opts), &pi, err) < 0)
		return -1;
	sandlot_storage_info_t full = {
		.pool_bytes = pi.size, .usable_bytes = pi.usable, .reserved_bytes = pi.reserved,
	};
	sandlot__out_put(out, &full, sizeof(full));
	return 0;
}

int sandlot_storage_grow(const sandlot_options_t *opts, uint64_t bytes, sandlot_error_t **err)
{
	sandlot_options_t o;
	if (norm(&opts, &o, err) < 0)
		return -1;
	const struct sandlot_backend_ops *ops = pool_keeper("storage grow", err);
	return ops ? ops->storage_grow(dir_of(opts), bytes, err) : -1;
}

int sandlot_storage_unmount(const sandlot_options_t *opts, sandlot_error_t **err)
{
	sandlot_options_t o;
	if (norm(&opts, &o, err) < 0)
		return -1;
	const struct sandlot_backend_ops *ops = pool_keeper("storage unmount", err);
	return ops ? ops->storage_unmount(dir_of(opts), err) : -1;
}
