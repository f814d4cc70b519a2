/* Copying files and directory trees between the host and a sandbox for
 * `sandlot run --upload/--download`. */
#include "transfer.h"

#include <stdio.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"

int transfer_parse(const char *spec, int upload, struct transfer *out)
{
	memset(out, 0, sizeof(*out));
	const char *colon = strchr(spec, ':');
	char *first = colon ? strndup(spec, (size_t)(colon - spec)) : strdup(spec);
	char *second = colon ? strdup(colon + 1) : NULL;
	if (!first || (colon && !second)) {
		free(first);
		free(second);
		return -1;
	}
	if (!*first || (second && !*second)) {
		free(first);
		free(second);
		errno = EINVAL;
		return -1;
	}
	/* The side that was left out defaults to the other's base name: into
	 * /home/user for uploads, into the current directory for downloads. */
	if (!second) {
		cleanup_free char *copy = strdup(first);
		second = copy ? strdup(basename(copy)) : NULL;
		if (!second) {
			free(first);
			return -1;
		}
	} else if (second[strlen(second) - 1] == '/') {
		cleanup_free char *copy = strdup(first);
		char *joined = NULL;
		if (!copy || asprintf(&joined, "%s%s", second, basename(copy)) < 0) {
			free(first);
			free(second);
			return -1;
		}
		free(second);
		second = joined;
	}
	if (upload) {
		out->local = first;
		out->remote = second;
	} else {
		out->remote = first;
		out->local = second;
	}
	return 0;
}

void transfer_free(struct transfer *t)
{
	free(t->local);
	free(t->remote);
}

/* ---- upload ------------------------------------------------------------ */

static int upload_tree(sandlot_t *sb, const char *local, const char *remote, int depth,
		       sandlot_error_t **err)
{
	struct stat st;
	if (lstat(local, &st) < 0)
		return sandlot__error_errno(err, errno, "%s", local);
	if (S_ISREG(st.st_mode)) {
		cleanup_close int fd = open(local, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return sandlot__error_errno(err, errno, "%s", local);
		return sandlot_file_write_fd(sb, remote, st.st_mode & 07777, SANDLOT_WRITE_MKDIRS, fd, err);
	}
	if (!S_ISDIR(st.st_mode)) {
		/* Symlinks and special files are not copied: following a link
		 * could upload something the user did not mean to share. */
		fprintf(stderr, "sandlot: --upload: skipping %s (not a regular file or directory)\n",
			local);
		return 0;
	}
	if (depth > 64)
		return sandlot__error_errno(err, ELOOP, "%s: directory tree too deep", local);
	if (sandlot_mkdir(sb, remote, st.st_mode & 07777, SANDLOT_MKDIR_PARENTS, err) < 0)
		return -1;
	cleanup_closedir DIR *d = opendir(local);
	if (!d)
		return sandlot__error_errno(err, errno, "%s", local);
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		cleanup_free char *l = NULL, *r = NULL;
		if (asprintf(&l, "%s/%s", local, de->d_name) < 0 ||
		    asprintf(&r, "%s/%s", remote, de->d_name) < 0)
			return sandlot__error_errno(err, ENOMEM, "%s", local);
		if (upload_tree(sb, l, r, depth + 1, err) < 0)
			return -1;
	}
	return 0;
}

int transfer_upload(sandlot_t *sb, const struct transfer *t, sandlot_error_t **err)
{
	return upload_tree(sb, t->local, t->remote, 0, err);
}

/* ---- download ---------------------------------------------------------- */

/* Write to a temporary file next to the target and rename it into place,
 * so an interrupted download never leaves a half-written file. */
static int download_file(sandlot_t *sb, const char *remote, const char *local, uint32_t mode,
			 sandlot_error_t **err)
{
	cleanup_free char *tmp = NULL;
	if (asprintf(&tmp, "%s.sandlot-XXXXXX", local) < 0)
		return sandlot__error_errno(err, ENOMEM, "%s", local);
	cleanup_close int fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return sandlot__error_errno(err, errno, "%s", local);
	if (sandlot_file_read_fd(sb, remote, fd, err) < 0) {
		unlink(tmp);
		return -1;
	}
	if (fchmod(fd, mode & 0777) < 0 || fsync(fd) < 0 || rename(tmp, local) < 0) {
		int e = errno;
		unlink(tmp);
		return sandlot__error_errno(err, e, "%s", local);
	}
	return 0;
}

static int download_tree(sandlot_t *sb, const char *remote, const char *local, int depth,
			 sandlot_error_t **err)
{
	sandlot_stat_t st;
	if (sandlot_stat(sb, remote, &st, err) < 0)
		return -1;
	if (st.type == SANDLOT_FILE)
		return download_file(sb, remote, local, st.mode ? st.mode : 0644, err);
	if (st.type != SANDLOT_DIR) {
		fprintf(stderr, "sandlot: --download: skipping %s (not a regular file or directory)\n",
			remote);
		return 0;
	}
	if (depth > 64)
		return sandlot__error_errno(err, ELOOP, "%s: directory tree too deep", remote);
	if (mkdir(local, 0755) < 0 && errno != EEXIST)
		return sandlot__error_errno(err, errno, "%s", local);
	sandlot_dirent_t *ents;
	size_t n;
	if (sandlot_list(sb, remote, &ents, &n, err) < 0)
		return -1;
	int rc = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		/* libsandlot refuses such names already; a name from the sandbox
		 * is joined into a host path only after this check of our own. */
		const char *why = sandlot__entry_name_problem(ents[i].name, strlen(ents[i].name));
		if (why) {
			rc = sandlot__error(err, EPROTO, "--download %s: the sandbox listed %s", remote,
					    why);
			break;
		}
		cleanup_free char *l = NULL, *r = NULL;
		if (asprintf(&l, "%s/%s", local, ents[i].name) < 0 ||
		    asprintf(&r, "%s/%s", remote, ents[i].name) < 0)
			rc = sandlot__error_errno(err, ENOMEM, "%s", remote);
		else
			rc = download_tree(sb, r, l, depth + 1, err);
	}
	sandlot_dirents_free(ents, n);
	return rc;
}

int transfer_download(sandlot_t *sb, const struct transfer *t, sandlot_error_t **err)
{
	return download_tree(sb, t->remote, t->local, 0, err);
}
