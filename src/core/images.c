/* The image store, sandbox side: resolve, lock, read the config (see
 * images.h); attaching the image is the backend's (ns-image.c). */
#include "images.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "internal.h"

#define CONFIG_MAX (64 << 10)

static int is_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

int sandlot__image_name_valid(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > 64 || strcmp(name, "host") == 0)
		return 0;
	if (!((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= '0' && name[0] <= '9')))
		return 0;
	for (const char *p = name; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '.' || *p == '_' ||
		      *p == '-'))
			return 0;
	return !(n >= 12 && is_hex(name, n));
}

const char *sandlot__data_dir(const char *given)
{
	if (given && *given)
		return given;
	const char *env = getenv("SANDLOT_DATA_DIR");
	return env && *env ? env : "/var/lib/sandlot";
}

/* images/<digest> exists and is a directory. */
static int digest_present(const char *data_dir, const char *digest)
{
	char path[4200];
	struct stat st;
	snprintf(path, sizeof(path), "%s/images/%s/rootfs", data_dir, digest);
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int unknown(sandlot_error_t **err, const char *ref)
{
	return sandlot__error(err, ENOENT,
			      "unknown image \"%.80s\" (built images: sandlot image ls; \"host\" is "
			      "always there)", ref);
}

int sandlot__image_resolve(const char *data_dir, const char *ref, char *digest,
			   sandlot_error_t **err)
{
	if (!ref || !*ref || strcmp(ref, "host") == 0)
		return unknown(err, ref ? ref : "");
	if (sandlot__image_name_valid(ref)) {
		char path[4200], target[128];
		snprintf(path, sizeof(path), "%s/images/names/%s", data_dir, ref);
		ssize_t n = readlink(path, target, sizeof(target) - 1);
		if (n < 0)
			return errno == ENOENT || errno == ENOTDIR
				       ? unknown(err, ref)
				       : sandlot__error_errno(err, errno, "read image name %s", path);
		target[n] = '\0';
		const char *d = strncmp(target, "../", 3) == 0 ? target + 3 : target;
		if (strlen(d) != SANDLOT_DIGEST_HEX || !is_hex(d, SANDLOT_DIGEST_HEX))
			return sandlot__error(err, EINVAL, "image name %s points at \"%s\", not a digest",
					      ref, target);
		if (!digest_present(data_dir, d))
			return sandlot__error(err, ENOENT, "image \"%s\" is gone (its name points at "
					      "the missing image %.12s)", ref, d);
		memcpy(digest, d, SANDLOT_DIGEST_HEX + 1);
		return 0;
	}
	const char *hex = strncmp(ref, "sha256:", 7) == 0 ? ref + 7 : ref;
	size_t n = strlen(hex);
	if (n < 12 || n > SANDLOT_DIGEST_HEX || !is_hex(hex, n))
		return sandlot__error(err, EINVAL,
				      "invalid image \"%.80s\": expected \"host\", an image name "
				      "([a-z0-9._-], at most 64) or a digest (12 to 64 hex digits)", ref);
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/images", data_dir);
	cleanup_closedir DIR *d = opendir(dir);
	if (!d)
		return errno == ENOENT ? unknown(err, ref)
				       : sandlot__error_errno(err, errno, "open %s", dir);
	int found = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strlen(de->d_name) != SANDLOT_DIGEST_HEX || !is_hex(de->d_name, SANDLOT_DIGEST_HEX) ||
		    strncmp(de->d_name, hex, n) != 0)
			continue;
		if (found++)
			return sandlot__error(err, EINVAL, "image digest prefix %s is ambiguous", hex);
		memcpy(digest, de->d_name, SANDLOT_DIGEST_HEX + 1);
	}
	if (!found || !digest_present(data_dir, digest))
		return unknown(err, ref);
	return 0;
}

static int push(char ***v, size_t *n, const char *s)
{
	char **nv = realloc(*v, (*n + 2) * sizeof(char *));
	if (!nv)
		return -1;
	*v = nv;
	if (!(nv[*n] = strdup(s)))
		return -1;
	nv[++*n] = NULL;
	return 0;
}

/* The config file: "env K=V", "workdir DIR", "user NAME" lines, written by
 * the image builder.  Unknown keys are ignored (newer builders). */
static int read_config(const char *path, struct sandlot_image *img, sandlot_error_t **err)
{
	size_t n = 0;
	img->env = calloc(1, sizeof(char *));
	if (!img->env)
		return sandlot__error(err, ENOMEM, "out of memory");
	cleanup_free char *text = sandlot__read_file(path, CONFIG_MAX);
	if (!text)
		return errno == ENOENT ? 0 : sandlot__error_errno(err, errno, "read %s", path);
	for (char *line = text, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		char *val = strchr(line, ' ');
		if (!val)
			continue;
		*val++ = '\0';
		if (strcmp(line, "env") == 0 && strchr(val, '=') && val[0] != '=') {
			if (push(&img->env, &n, val) < 0)
				return sandlot__error(err, ENOMEM, "out of memory");
		} else if (strcmp(line, "workdir") == 0 && val[0] == '/') {
			free(img->workdir);
			if (!(img->workdir = strdup(val)))
				return sandlot__error(err, ENOMEM, "out of memory");
		} else if (strcmp(line, "user") == 0 && *val) {
			free(img->user);
			if (!(img->user = strdup(val)))
				return sandlot__error(err, ENOMEM, "out of memory");
		}
	}
	return 0;
}

int sandlot__image_open(const char *data_dir, const char *ref, struct sandlot_image *img,
			sandlot_error_t **err)
{
	memset(img, 0, sizeof(*img));
	img->lock_fd = -1;
	if (sandlot__image_resolve(data_dir, ref, img->digest, err) < 0)
		return -1;
	char path[4200];
	snprintf(path, sizeof(path), "%s/images/%s", data_dir, img->digest);
	cleanup_close int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return sandlot__error_errno(err, errno, "open image %s", path);
	int lfd = openat(dfd, "lock", O_RDONLY | O_CLOEXEC);
	if (lfd < 0)
		return sandlot__error_errno(err, errno, "open %s/lock", path);
	img->lock_fd = lfd;
	if (flock(lfd, LOCK_SH | LOCK_NB) < 0) {
		int e = errno;
		sandlot__image_release(img);
		return e == EWOULDBLOCK ? sandlot__error(err, EBUSY, "image \"%s\" is being removed", ref)
					: sandlot__error_errno(err, e, "lock image %s", path);
	}
	/* `image rm` renames the directory away before deleting it, holding
	 * the lock exclusively: if that happened between our open and our
	 * lock, the path no longer leads to what we locked. */
	struct stat a, b;
	if (fstat(dfd, &a) < 0 || stat(path, &b) < 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
		sandlot__image_release(img);
		return sandlot__error(err, ENOENT, "image \"%s\" was removed", ref);
	}
	snprintf(path, sizeof(path), "%s/images/%s/config", data_dir, img->digest);
	if (read_config(path, img, err) < 0) {
		sandlot__image_release(img);
		return -1;
	}
	return 0;
}

void sandlot__image_release(struct sandlot_image *img)
{
	if (img->lock_fd >= 0)
		close(img->lock_fd);
	img->lock_fd = -1;
	sandlot__strv_free(img->env);
	img->env = NULL;
	free(img->workdir);
	free(img->user);
	img->workdir = img->user = NULL;
}
