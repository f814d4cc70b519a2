/* sandlot cp: copy files and directory trees between the host and a
 * sandbox of sandlotd, streamed both ways (files raw, trees as tar). */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"
#include "common/cleanup.h"

static const char cp_help[] =
	"NAME\n"
	"    sandlot cp - copy files between the host and a sandbox\n"
	"\n"
	"SYNOPSIS\n"
	"    sandlot cp [OPTIONS] LOCAL ID:PATH\n"
	"    sandlot cp [OPTIONS] ID:PATH LOCAL\n"
	"\n"
	"DESCRIPTION\n"
	"    Copies a file or a directory tree into the sandbox ID, or out of it,\n"
	"    as `docker cp` does.  PATH is absolute or relative to /home/user\n"
	"    (ID: alone is /home/user).  Copies stream: files of any size, any\n"
	"    bytes.\n"
	"\n"
	"    If the destination is an existing directory (or ends in /), the\n"
	"    source is copied into it under its own name; otherwise the source is\n"
	"    copied to the destination's name.  A source path ending in /. copies\n"
	"    the contents of the directory rather than the directory itself.\n"
	"    Parent directories inside the sandbox are created as needed.\n"
	"\n"
	"    Regular files and directories are copied, with their permission\n"
	"    bits (set-id bits dropped; files copied out are subject to the\n"
	"    umask).  Symlinks, hard links and special files are skipped with a\n"
	"    warning, in both directions: a sandbox cannot plant a link on the\n"
	"    host.  A file copied out is written to a temporary name and renamed\n"
	"    into place when complete.\n"
	"\n"
	"    LOCAL may be - : the standard input is copied into the file\n"
	"    ID:PATH, or the file ID:PATH is written to standard output (a\n"
	"    directory is written as a tar archive).\n"
	"\n"
	"OPTIONS\n"
	CLI_CLIENT_OPTIONS_HELP
	"    -h, --help             show this help\n"
	"\n"
	"EXIT STATUS\n"
	"    0 on success; 1 if the source does not exist, the destination cannot\n"
	"    be written, sandlotd refused (no such sandbox, disk quota exceeded),\n"
	"    or a download was cut short (no partial file is kept); 125 if\n"
	"    sandlotd could not be reached; 2 for bad arguments.\n"
	"\n"
	"EXAMPLES\n"
	"    sandlot cp data.csv sb-7x2k...:input/\n"
	"    sandlot cp ./project sb-7x2k...:/home/user/project\n"
	"    sandlot cp sb-7x2k...:out/plot.png .\n"
	"    sandlot cp sb-7x2k...:results ./results-run-3\n";

static const struct option cp_opts[] = {
	CLI_CLIENT_OPTIONS,
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

#define CHUNK 65536
#define PENDING_MAX (4u << 20)   /* downloaded bytes waiting for the tar reader */

struct remote {
	char *id;
	char *path;
	const char *arg;   /* as given */
};

/* ID:PATH?  The part before the first ':' is an id if it has no '/', so
 * that ./a:b and /x:y stay local paths. */
static int is_remote(const char *s)
{
	const char *colon = strchr(s, ':');
	return colon && colon != s && !memchr(s, '/', (size_t)(colon - s));
}

static int parse_remote(const char *s, struct remote *r)
{
	const char *colon = strchr(s, ':');
	r->arg = s;
	r->id = strndup(s, (size_t)(colon - s));
	r->path = strdup(colon[1] ? colon + 1 : ".");
	return r->id && r->path ? 0 : -1;
}

/* Last component of a path, ignoring trailing slashes ("a/b/" → "b");
 * "." for "", "/" or a path ending in "/.".  A new string. */
static char *base_name(const char *p)
{
	size_t n = strlen(p);
	while (n > 1 && p[n - 1] == '/')
		n--;
	if (n == 0 || (n == 1 && p[0] == '/'))
		return strdup(".");
	const char *start = p + n;
	while (start > p && start[-1] != '/')
		start--;
	return strndup(start, (size_t)(p + n - start));
}

static char *join(const char *dir, const char *name)
{
	char *out;
	size_t n = strlen(dir);
	if (!strcmp(name, "."))
		return strdup(dir);
	if (asprintf(&out, "%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", name) < 0)
		return NULL;
	return out;
}

static char *file_url(const char *route, const struct remote *r, const char *path, const char *extra)
{
	cleanup_free char *id = client_escape(r->id);
	cleanup_free char *p = client_escape(path);
	char *url;
	if (!id || !p || asprintf(&url, "/v1/sandboxes/%s/%s?path=%s%s", id, route, p,
				  extra ? extra : "") < 0)
		return NULL;
	return url;
}

/* Stat a path in the sandbox.  Returns 1 with *info (a new reference) if it
 * exists, 0 if not (404 not_found), or an exit status (> 1) after
 * reporting any other failure.  A 404 for the sandbox itself (not the
 * path) is reported too. */
static int remote_stat(struct client *c, const struct remote *r, const char *path, json_t **info)
{
	cleanup_free char *url = file_url("files/stat", r, path, NULL);
	if (!url)
		return EXIT_SANDLOT;
	struct client_req req = { .method = "GET", .path = url };
	client_perform(c, &req);
	int rc;
	if (req.status == 200) {
		*info = json_incref(req.reply);
		rc = 1;
	} else if (req.status == 404) {
		/* The path, or the sandbox?  Ask about the sandbox. */
		cleanup_free char *id = client_escape(r->id);
		cleanup_free char *sb_url = NULL;
		if (!id || asprintf(&sb_url, "/v1/sandboxes/%s", id) < 0) {
			client_req_free(&req);
			return EXIT_SANDLOT;
		}
		struct client_req sb = { .method = "GET", .path = sb_url };
		client_perform(c, &sb);
		if (sb.status == 200 && !strcmp(client_str(sb.reply, "state"), "running")) {
			rc = 0;
		} else if (sb.status == 200) {
			fprintf(stderr, "sandlot cp: %s: sandbox %s has ended (%s)\n", r->arg, r->id,
				client_str(sb.reply, "state"));
			rc = 1 + 256;
		} else {
			rc = client_report(c, &sb, r->arg);
			if (rc < 2)
				rc = 1 + 256;
		}
		client_req_free(&sb);
	} else {
		rc = client_report(c, &req, r->arg);
		if (rc < 2)
			rc = 1 + 256;   /* "failed with status 1" */
	}
	client_req_free(&req);
	return rc;
}

static int status_of(int rc)
{
	return rc > 255 ? rc - 256 : rc;
}

/* ---- upload: a file ------------------------------------------------------ */

struct fd_source {
	int fd;
	const char *name;
	int64_t left;      /* bytes still to send; -1 = until EOF */
};

static ssize_t fd_source_read(void *ud, char *buf, size_t max)
{
	struct fd_source *s = ud;
	if (s->left == 0)
		return 0;
	if (s->left > 0 && (int64_t)max > s->left)
		max = (size_t)s->left;
	for (;;) {
		ssize_t n = read(s->fd, buf, max);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fprintf(stderr, "sandlot cp: %s: %s\n", s->name, strerror(errno));
			return -1;
		}
		if (n == 0 && s->left > 0) {
			fprintf(stderr, "sandlot cp: %s: the file shrank while being copied\n", s->name);
			return -1;
		}
		if (s->left > 0)
			s->left -= n;
		return n;
	}
}

static int upload_file(struct client *c, const struct remote *r, const char *target,
		       const char *local, int fd, const struct stat *st)
{
	char extra[32] = "";
	if (st)
		snprintf(extra, sizeof(extra), "&mode=%04o", (unsigned)(st->st_mode & 0777));
	cleanup_free char *url = file_url("files", r, target, extra);
	if (!url)
		return EXIT_SANDLOT;
	struct fd_source src = { .fd = fd, .name = local, .left = st ? (int64_t)st->st_size : -1 };
	struct client_req req = {
		.method = "PUT", .path = url, .source = fd_source_read, .source_ud = &src,
		.source_len = src.left,
	};
	client_perform(c, &req);
	int rc = 0;
	if (req.aborted && !req.status)
		rc = 1;
	else if (req.status < 200 || req.status >= 300)
		rc = client_report(c, &req, r->arg);
	client_req_free(&req);
	return rc;
}

/* ---- upload: a tree as tar, produced step by step as curl asks ------------- */

struct walk_dir {
	DIR *d;
	char *rel;   /* path under the root ("" for the root) */
};

struct tar_source {
	struct archive *a;
	const char *root;          /* local directory */
	struct walk_dir stack[PATH_MAX / 2];
	int depth;
	int fd;                    /* file being copied */
	char *fd_name;
	int64_t fd_left;
	char *out;                 /* tar bytes not yet handed to curl */
	size_t out_len, out_off, out_cap;
	int done, failed;
	unsigned long skipped;
};

static la_ssize_t tar_out(struct archive *a, void *ud, const void *buf, size_t len)
{
	struct tar_source *t = ud;
	if (t->out_off == t->out_len)
		t->out_off = t->out_len = 0;
	if (t->out_len + len > t->out_cap) {
		size_t cap = t->out_cap ? t->out_cap : 1 << 17;
		while (cap < t->out_len + len)
			cap *= 2;
		char *nb = realloc(t->out, cap);
		if (!nb) {
			archive_set_error(a, ENOMEM, "out of memory");
			return -1;
		}
		t->out = nb;
		t->out_cap = cap;
	}
	memcpy(t->out + t->out_len, buf, len);
	t->out_len += len;
	return (la_ssize_t)len;
}

static char *local_path(const struct tar_source *t, const char *rel)
{
	return join(t->root, *rel ? rel : ".");
}

static int tar_fail(struct tar_source *t, const char *what, const char *msg)
{
	fprintf(stderr, "sandlot cp: %s: %s\n", what, msg);
	t->failed = 1;
	return -1;
}

/* One step: the next entry's header, or the next block of a file. */
static int tar_step(struct tar_source *t)
{
	static char buf[CHUNK];
	if (t->fd >= 0) {
		size_t want = t->fd_left < CHUNK ? (size_t)t->fd_left : CHUNK;
		ssize_t n = want ? read(t->fd, buf, want) : 0;
		if (n < 0 && errno == EINTR)
			return 0;
		if (n < 0)
			return tar_fail(t, t->fd_name, strerror(errno));
		if (n > 0) {
			if (archive_write_data(t->a, buf, (size_t)n) < 0)
				return tar_fail(t, t->fd_name, archive_error_string(t->a));
			t->fd_left -= n;
			return 0;
		}
		if (t->fd_left > 0)
			return tar_fail(t, t->fd_name, "the file shrank while being copied");
		close(t->fd);
		t->fd = -1;
		free(t->fd_name);
		t->fd_name = NULL;
		if (archive_write_finish_entry(t->a) < 0)
			return tar_fail(t, "tar", archive_error_string(t->a));
		return 0;
	}
	if (t->depth == 0) {
		if (archive_write_close(t->a) < 0)
			return tar_fail(t, "tar", archive_error_string(t->a));
		t->done = 1;
		return 0;
	}
	struct walk_dir *top = &t->stack[t->depth - 1];
	errno = 0;
	struct dirent *de = readdir(top->d);
	if (!de) {
		if (errno) {
			cleanup_free char *p = local_path(t, top->rel);
			return tar_fail(t, p ? p : top->rel, strerror(errno));
		}
		closedir(top->d);
		free(top->rel);
		t->depth--;
		return 0;
	}
	if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
		return 0;
	cleanup_free char *rel = *top->rel ? join(top->rel, de->d_name) : strdup(de->d_name);
	cleanup_free char *path = rel ? local_path(t, rel) : NULL;
	if (!path)
		return tar_fail(t, de->d_name, "out of memory");
	struct stat st;
	if (lstat(path, &st) < 0)
		return tar_fail(t, path, strerror(errno));
	if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "sandlot cp: warning: skipping %s (%s)\n", path,
			S_ISLNK(st.st_mode) ? "a symlink" : "not a regular file or directory");
		t->skipped++;
		return 0;
	}
	int fd = -1;
	DIR *d = NULL;
	if (S_ISREG(st.st_mode)) {
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			return tar_fail(t, path, strerror(errno));
	} else {
		if (t->depth >= (int)SANDLOT_ARRAY_SIZE(t->stack))
			return tar_fail(t, path, "directories nested too deeply");
		d = opendir(path);
		if (!d)
			return tar_fail(t, path, strerror(errno));
	}
	struct archive_entry *e = archive_entry_new();
	archive_entry_set_pathname(e, rel);
	archive_entry_set_filetype(e, S_ISREG(st.st_mode) ? AE_IFREG : AE_IFDIR);
	archive_entry_set_perm(e, st.st_mode & 0777);
	archive_entry_set_size(e, S_ISREG(st.st_mode) ? st.st_size : 0);
	archive_entry_set_mtime(e, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
	int wr = archive_write_header(t->a, e);
	archive_entry_free(e);
	if (wr < ARCHIVE_WARN) {
		if (fd >= 0)
			close(fd);
		if (d)
			closedir(d);
		return tar_fail(t, path, archive_error_string(t->a));
	}
	if (fd >= 0) {
		t->fd = fd;
		t->fd_left = st.st_size;
		t->fd_name = steal_pointer(&path);
	} else {
		t->stack[t->depth].d = d;
		t->stack[t->depth].rel = steal_pointer(&rel);
		t->depth++;
		if (archive_write_finish_entry(t->a) < 0)
			return tar_fail(t, "tar", archive_error_string(t->a));
	}
	return 0;
}

static ssize_t tar_source_read(void *ud, char *buf, size_t max)
{
	struct tar_source *t = ud;
	while (t->out_off == t->out_len && !t->done) {
		if (tar_step(t) < 0)
			return -1;
	}
	size_t n = t->out_len - t->out_off;
	if (n > max)
		n = max;
	memcpy(buf, t->out + t->out_off, n);
	t->out_off += n;
	return (ssize_t)n;
}

static void tar_source_free(struct tar_source *t)
{
	while (t->depth > 0) {
		t->depth--;
		closedir(t->stack[t->depth].d);
		free(t->stack[t->depth].rel);
	}
	if (t->fd >= 0)
		close(t->fd);
	free(t->fd_name);
	if (t->a)
		archive_write_free(t->a);
	free(t->out);
}

static int upload_tree(struct client *c, const struct remote *r, const char *target, const char *local)
{
	struct tar_source *t = calloc(1, sizeof(*t));
	if (!t)
		return EXIT_SANDLOT;
	t->fd = -1;
	t->root = local;
	int rc = 0;
	t->stack[0].d = opendir(local);
	t->stack[0].rel = strdup("");
	if (!t->stack[0].d) {
		fprintf(stderr, "sandlot cp: %s: %s\n", local, strerror(errno));
		free(t->stack[0].rel);
		free(t);
		return 1;
	}
	t->depth = 1;
	t->a = archive_write_new();
	if (!t->a || archive_write_set_format_pax_restricted(t->a) != ARCHIVE_OK ||
	    archive_write_set_bytes_in_last_block(t->a, 1) != ARCHIVE_OK ||
	    archive_write_open2(t->a, t, NULL, tar_out, NULL, NULL) != ARCHIVE_OK) {
		fprintf(stderr, "sandlot cp: cannot set up a tar writer\n");
		tar_source_free(t);
		free(t);
		return EXIT_SANDLOT;
	}

	/* The destination directory itself, then its contents. */
	cleanup_free char *mkdir_url = file_url("files/mkdir", r, target, NULL);
	cleanup_free char *url = file_url("files/archive", r, target, NULL);
	if (!mkdir_url || !url) {
		tar_source_free(t);
		free(t);
		return EXIT_SANDLOT;
	}
	struct client_req mk = { .method = "POST", .path = mkdir_url };
	client_perform(c, &mk);
	if (mk.status < 200 || mk.status >= 300) {
		rc = client_report(c, &mk, r->arg);
		client_req_free(&mk);
		tar_source_free(t);
		free(t);
		return rc;
	}
	client_req_free(&mk);

	struct client_req req = {
		.method = "POST", .path = url, .source = tar_source_read, .source_ud = t,
		.source_len = -1, .content_type = "application/x-tar",
	};
	client_perform(c, &req);
	if (req.aborted && t->failed) {
		rc = 1;
	} else if (req.status < 200 || req.status >= 300) {
		rc = client_report(c, &req, r->arg);
	} else {
		size_t i;
		json_t *s;
		json_array_foreach(json_object_get(req.reply, "skipped"), i, s)
			fprintf(stderr, "sandlot cp: warning: sandlotd skipped %s\n",
				json_is_string(s) ? json_string_value(s) : "an entry");
	}
	client_req_free(&req);
	tar_source_free(t);
	free(t);
	return rc;
}

static int cp_upload(struct client *c, const char *local, const struct remote *r)
{
	json_t *info = NULL;
	int have = remote_stat(c, r, r->path, &info);
	if (have > 1)
		return status_of(have);
	const char *rtype = have ? client_str(info, "type") : "";
	int into_dir = !strcmp(rtype, "directory") || r->path[strlen(r->path) - 1] == '/';
	int rc;

	if (!strcmp(local, "-")) {
		if (into_dir) {
			fprintf(stderr, "sandlot cp: %s is a directory: name the file to write\n", r->arg);
			json_decref(info);
			return 1;
		}
		rc = upload_file(c, r, r->path, "standard input", 0, NULL);
		json_decref(info);
		return rc;
	}

	struct stat st;
	if (stat(local, &st) < 0) {
		fprintf(stderr, "sandlot cp: %s: %s\n", local, strerror(errno));
		json_decref(info);
		return 1;
	}
	if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "sandlot cp: %s: not a regular file or directory\n", local);
		json_decref(info);
		return 1;
	}
	cleanup_free char *name = base_name(local);
	cleanup_free char *target = into_dir ? join(r->path, name) : strdup(r->path);
	if (!name || !target) {
		json_decref(info);
		return EXIT_SANDLOT;
	}
	if (S_ISDIR(st.st_mode)) {
		/* Onto an existing non-directory?  (Only when not copying into.) */
		if (have && !into_dir && strcmp(rtype, "directory") != 0) {
			fprintf(stderr, "sandlot cp: cannot overwrite non-directory %s with directory %s\n",
				r->arg, local);
			json_decref(info);
			return 1;
		}
		rc = upload_tree(c, r, target, local);
	} else {
		cleanup_close int fd = open(local, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			fprintf(stderr, "sandlot cp: %s: %s\n", local, strerror(errno));
			rc = 1;
		} else {
			rc = upload_file(c, r, target, local, fd, &st);
		}
	}
	json_decref(info);
	return rc;
}

/* ---- download: a file ---------------------------------------------------- */

struct fd_sink {
	int fd;
	const char *name;
	int failed;
};

static int fd_sink_write(void *ud, const char *data, size_t len)
{
	struct fd_sink *s = ud;
	if (client_write_all(s->fd, data, len) < 0) {
		if (errno != EPIPE)
			fprintf(stderr, "sandlot cp: %s: %s\n", s->name, strerror(errno));
		s->failed = 1;
		return -1;
	}
	return 0;
}

/* A download whose answer broke off mid-body: say so (exit 1).  `kept`
 * says what happened to what arrived. */
static int report_cut(const struct client_req *req, const char *what, const char *kept)
{
	fprintf(stderr, "sandlot cp: %s: the download was cut short (%s): %s\n", what,
		req->err_msg ? req->err_msg : "the stream ended early", kept);
	return 1;
}

/* GET a file or archive route into fd.  0 or an exit status. */
static int download_to_fd(struct client *c, const struct remote *r, const char *url, int fd,
			  const char *name)
{
	struct fd_sink sink = { .fd = fd, .name = name };
	struct client_req req = { .method = "GET", .path = url, .sink = fd_sink_write, .sink_ud = &sink };
	const char *kept = fd == 1 ? "what was written to the standard output is incomplete"
		: "nothing of it is kept";
	client_perform(c, &req);
	int rc = 0;
	if (sink.failed)
		rc = 1;
	else if (client_cut(&req))
		rc = report_cut(&req, r->arg, kept);
	else if (req.transport || req.status < 200 || req.status >= 300)
		rc = client_report(c, &req, r->arg);
	client_req_free(&req);
	return rc;
}

static int download_file(struct client *c, const struct remote *r, json_t *info, const char *target)
{
	cleanup_free char *url = file_url("files", r, r->path, NULL);
	if (!url)
		return EXIT_SANDLOT;
	if (!strcmp(target, "-"))
		return download_to_fd(c, r, url, 1, "standard output");

	/* Into a temporary file next to the target, renamed when complete. */
	cleanup_free char *tmp = NULL;
	if (asprintf(&tmp, "%s.sandlot-XXXXXX", target) < 0)
		return EXIT_SANDLOT;
	cleanup_close int fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "sandlot cp: %s: %s\n", target, strerror(errno));
		return 1;
	}
	int rc = download_to_fd(c, r, url, fd, target);
	if (rc == 0) {
		const char *m = client_str(info, "mode");
		unsigned long mode = *m ? strtoul(m, NULL, 8) & 0777 : 0644;
		mode_t mask = umask(0);
		umask(mask);
		if (fchmod(fd, (mode_t)(mode & ~mask)) < 0 || fsync(fd) < 0 || close(steal_fd(&fd)) < 0 ||
		    rename(tmp, target) < 0) {
			fprintf(stderr, "sandlot cp: %s: %s\n", target, strerror(errno));
			rc = 1;
		}
	}
	if (rc != 0)
		unlink(tmp);
	return rc;
}

/* ---- download: a tree, extracted as it arrives --------------------------- */

struct tar_sink {
	struct client *c;
	struct client_req *req;
	char *pend, *given;           /* received / handed to libarchive */
	size_t pend_len, pend_cap, given_cap;
};

static int tar_sink_write(void *ud, const char *data, size_t len)
{
	struct tar_sink *s = ud;
	if (s->pend_len >= PENDING_MAX)
		return 1;   /* pause: the reader catches up first */
	if (s->pend_len + len > s->pend_cap) {
		size_t cap = s->pend_cap ? s->pend_cap : 1 << 17;
		while (cap < s->pend_len + len)
			cap *= 2;
		char *nb = realloc(s->pend, cap);
		if (!nb)
			return -1;
		s->pend = nb;
		s->pend_cap = cap;
	}
	memcpy(s->pend + s->pend_len, data, len);
	s->pend_len += len;
	return 0;
}

/* libarchive's read callback: run the transfer until bytes are there. */
static la_ssize_t tar_sink_read(struct archive *a, void *ud, const void **out)
{
	struct tar_sink *s = ud;
	while (s->pend_len == 0 && !client_done(s->req))
		client_poll(s->c, NULL, 0, 1000);
	if (s->pend_len == 0) {
		if (s->req->transport || s->req->status < 200 || s->req->status >= 300 ||
		    (s->req->aborted && !s->req->status)) {
			archive_set_error(a, EIO, "download failed");
			return -1;
		}
		return 0;   /* end of the archive */
	}
	/* Hand over what arrived; the old buffer becomes the receiving one. */
	char *t = s->given;
	size_t tcap = s->given_cap;
	s->given = s->pend;
	s->given_cap = s->pend_cap;
	s->pend = t;
	s->pend_cap = tcap;
	size_t n = s->pend_len;
	s->pend_len = 0;
	client_unpause(s->req);
	*out = s->given;
	return (la_ssize_t)n;
}

/* An entry name from the sandbox, made safe: NULL to skip it (with a
 * warning), else a new relative path without "." components. */
static char *safe_name(const char *name)
{
	while (name[0] == '.' && name[1] == '/')
		name += 2;
	if (!*name || !strcmp(name, "."))
		return NULL;
	if (name[0] == '/') {
		fprintf(stderr, "sandlot cp: warning: skipping %s (absolute path)\n", name);
		return NULL;
	}
	cleanup_free char *copy = strdup(name);
	char *out = calloc(1, strlen(name) + 1);
	if (!copy || !out) {
		free(out);
		return NULL;
	}
	char *save = NULL;
	for (char *seg = strtok_r(copy, "/", &save); seg; seg = strtok_r(NULL, "/", &save)) {
		if (!strcmp(seg, "."))
			continue;
		if (!strcmp(seg, "..")) {
			fprintf(stderr, "sandlot cp: warning: skipping %s (contains ..)\n", name);
			free(out);
			return NULL;
		}
		if (*out)
			strcat(out, "/");
		strcat(out, seg);
	}
	if (!*out) {
		free(out);
		return NULL;
	}
	return out;
}

static int extract_tree(struct client *c, const struct remote *r, const char *url, const char *target)
{
	struct tar_sink s = { .c = c };
	struct client_req req = { .method = "GET", .path = url, .sink = tar_sink_write, .sink_ud = &s };
	s.req = &req;
	/* The regular file whose data is being written: removed if the
	 * archive breaks off inside it, so that no part of a file is left
	 * under its name. */
	char *partial = NULL;
	struct archive *a = archive_read_new();
	struct archive *disk = archive_write_disk_new();
	int rc = 0;
	if (!a || !disk) {
		rc = EXIT_SANDLOT;
		goto out;
	}
	archive_read_support_format_tar(a);
	/* No owners, no set-id bits, nothing through or as a symlink, no ..:
	 * the archive comes from the sandbox and is not trusted. */
	archive_write_disk_set_options(disk, ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
					       ARCHIVE_EXTRACT_SECURE_NODOTDOT);
	if (client_start(c, &req) < 0) {
		rc = client_report(c, &req, r->arg);
		goto out;
	}
	if (archive_read_open(a, &s, NULL, tar_sink_read, NULL) != ARCHIVE_OK) {
		rc = -1;
		goto done;
	}
	for (;;) {
		struct archive_entry *e;
		int h = archive_read_next_header(a, &e);
		if (h == ARCHIVE_EOF)
			break;
		if (h < ARCHIVE_WARN) {
			rc = -1;
			break;
		}
		const char *orig = archive_entry_pathname(e);
		cleanup_free char *name = safe_name(orig ? orig : "");
		if (!name)
			continue;
		mode_t type = archive_entry_filetype(e);
		if ((type != AE_IFREG && type != AE_IFDIR) || archive_entry_hardlink(e)) {
			fprintf(stderr, "sandlot cp: warning: skipping %s (%s)\n", name,
				type == AE_IFLNK ? "a symlink" : archive_entry_hardlink(e) ? "a hard link"
				: "not a regular file or directory");
			continue;
		}
		cleanup_free char *dest = join(target, name);
		if (!dest) {
			rc = EXIT_SANDLOT;
			break;
		}
		archive_entry_set_pathname(e, dest);
		archive_entry_set_perm(e, archive_entry_perm(e) & 0777);
		if (archive_write_header(disk, e) < ARCHIVE_WARN) {
			fprintf(stderr, "sandlot cp: %s: %s\n", dest, archive_error_string(disk));
			rc = 1;
			break;
		}
		if (type == AE_IFREG && !(partial = strdup(dest))) {
			rc = EXIT_SANDLOT;
			break;
		}
		const void *blk;
		size_t len;
		la_int64_t off;
		int d;
		while ((d = archive_read_data_block(a, &blk, &len, &off)) == ARCHIVE_OK) {
			if (archive_write_data_block(disk, blk, len, off) < ARCHIVE_WARN) {
				fprintf(stderr, "sandlot cp: %s: %s\n", dest, archive_error_string(disk));
				rc = 1;
				break;
			}
		}
		if (rc)
			break;
		if (d != ARCHIVE_EOF) {
			rc = -1;
			break;
		}
		if (archive_write_finish_entry(disk) < ARCHIVE_WARN) {
			fprintf(stderr, "sandlot cp: %s: %s\n", dest, archive_error_string(disk));
			rc = 1;
			break;
		}
		free(partial);
		partial = NULL;
	}
done:
	if (partial) {
		/* Not finished: closing the writer must not complete it. */
		archive_write_fail(disk);
		unlink(partial);
		free(partial);
	}
	if (rc != 0)
		client_cancel(&req);
	/* Let the transfer end to learn how it went. */
	while (!client_done(&req))
		client_poll(c, NULL, 0, 1000);
	if (client_cut(&req)) {
		rc = report_cut(&req, r->arg, "the files copied before are whole, the one being "
				"written was removed");
	} else if (req.transport || (req.status && (req.status < 200 || req.status >= 300)) ||
	    (!req.status && !req.aborted)) {
		rc = client_report(c, &req, r->arg);
	} else if (rc < 0) {
		fprintf(stderr, "sandlot cp: %s: bad archive from sandlotd: %s\n", r->arg,
			archive_error_string(a) ? archive_error_string(a) : "unknown error");
		rc = 1;
	}
out:
	if (a)
		archive_read_free(a);
	if (disk)
		archive_write_free(disk);
	client_req_free(&req);
	free(s.pend);
	free(s.given);
	return rc;
}

static int download_tree(struct client *c, const struct remote *r, const char *target)
{
	cleanup_free char *url = file_url("files/archive", r, r->path, NULL);
	if (!url)
		return EXIT_SANDLOT;
	if (!strcmp(target, "-"))
		return download_to_fd(c, r, url, 1, "standard output");
	struct stat st;
	if (stat(target, &st) == 0) {
		if (!S_ISDIR(st.st_mode)) {
			fprintf(stderr, "sandlot cp: cannot overwrite non-directory %s with directory %s\n",
				target, r->arg);
			return 1;
		}
	} else if (errno != ENOENT || mkdir(target, 0777) < 0) {
		fprintf(stderr, "sandlot cp: %s: %s\n", target, strerror(errno));
		return 1;
	}
	return extract_tree(c, r, url, target);
}

static int cp_download(struct client *c, const struct remote *r, const char *local)
{
	json_t *info = NULL;
	int have = remote_stat(c, r, r->path, &info);
	if (have > 1)
		return status_of(have);
	if (!have) {
		fprintf(stderr, "sandlot cp: %s: No such file or directory\n", r->arg);
		return 1;
	}
	const char *type = client_str(info, "type");
	int is_dir = !strcmp(type, "directory");
	if (!is_dir && strcmp(type, "file") != 0 && strcmp(type, "symlink") != 0) {
		fprintf(stderr, "sandlot cp: %s: not a regular file or directory\n", r->arg);
		json_decref(info);
		return 1;
	}
	cleanup_free char *target = NULL;
	struct stat st;
	if (!strcmp(local, "-")) {
		target = strdup("-");
	} else if (stat(local, &st) == 0 && S_ISDIR(st.st_mode)) {
		cleanup_free char *name = base_name(r->path);
		target = name ? join(local, name) : NULL;
	} else if (local[strlen(local) - 1] == '/') {
		fprintf(stderr, "sandlot cp: %s: No such directory\n", local);
		json_decref(info);
		return 1;
	} else {
		target = strdup(local);
	}
	if (!target) {
		json_decref(info);
		return EXIT_SANDLOT;
	}
	int rc;
	if (is_dir) {
		rc = download_tree(c, r, target);
	} else {
		if (strcmp(target, "-") != 0 && stat(target, &st) == 0 && S_ISDIR(st.st_mode)) {
			fprintf(stderr, "sandlot cp: cannot overwrite directory %s with a file\n", target);
			rc = 1;
		} else {
			rc = download_file(c, r, info, target);
		}
	}
	json_decref(info);
	return rc;
}

int cmd_cp(int argc, char **argv)
{
	const char *host = NULL, *token_file = NULL;
	optind = 1;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, "+:H:h", cp_opts, NULL)) != -1) {
		if (optarg && strcmp(optarg, "--") == 0)
			c = ':';
		switch (c) {
		CLI_CLIENT_OPTION_CASES(host, token_file);
		case 'h':
			fputs(cp_help, stdout);
			return 0;
		default:
			return cli_option_error("cp", c, argv);
		}
	}
	if (argc - optind != 2)
		return cli_usage_error("cp", "%s: sandlot cp SRC DST, with ID:PATH on one side",
				       argc - optind < 2 ? "missing arguments" : "too many arguments");
	const char *src = argv[optind], *dst = argv[optind + 1];
	if (!*src || !*dst)
		return cli_usage_error("cp", "empty path");
	int rs = is_remote(src), rd = is_remote(dst);
	if (rs == rd)
		return cli_usage_error("cp", "exactly one of SRC and DST must be ID:PATH "
				       "(got %s)", rs ? "two" : "none");

	struct remote r = { 0 };
	if (parse_remote(rs ? src : dst, &r) < 0)
		return EXIT_SANDLOT;
	struct client cl;
	int rc = client_init(&cl, "cp", host, token_file);
	if (rc == 0) {
		signal(SIGPIPE, SIG_IGN);
		rc = rs ? cp_download(&cl, &r, dst) : cp_upload(&cl, src, &r);
		client_free(&cl);
	}
	free(r.id);
	free(r.path);
	return rc;
}
