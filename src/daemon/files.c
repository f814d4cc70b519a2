/* sandlotd file routes (spec/openapi.yaml, "files"):
 *
 *   PUT    /v1/sandboxes/{id}/files?path=P[&mode=0644]     raw body → file (streamed, atomic)
 *   GET    /v1/sandboxes/{id}/files?path=P                 file → raw body (streamed)
 *   DELETE /v1/sandboxes/{id}/files?path=P[&recursive=1]
 *   GET    /v1/sandboxes/{id}/files/stat?path=P
 *   GET    /v1/sandboxes/{id}/files/list?path=DIR
 *   POST   /v1/sandboxes/{id}/files/mkdir?path=P[&mode=0755]
 *   POST   /v1/sandboxes/{id}/files/archive?path=DIR       tar body → extracted into DIR
 *   GET    /v1/sandboxes/{id}/files/archive?path=DIR       DIR → tar (streamed)
 *
 * This module never touches the host's filesystem.  Every path goes to
 * sandlot-init, which resolves it inside the sandbox's mount namespace
 * (spec/protocol.md, "Files"): relative paths are under /home/user, and no
 * "..", absolute name or symlink can reach a host file.  Archive extraction
 * adds its own refusals on top (absolute names, ".." components, links and
 * special files are skipped) so that an archive lands under DIR and nowhere
 * else in the sandbox either.
 *
 * Memory per request is bounded whatever the body size: an upload is
 * coalesced into one 64 KiB buffer and handed to a sandlot_file_writer; a
 * download goes from a sandlot_file_reader (credit-limited to 256 KiB by the
 * protocol) straight into libmicrohttpd's buffer; archive extraction runs
 * libarchive on a helper thread fed through a queue of at most 1 MiB; an
 * archive download is produced lazily, one step per stream read.
 *
 * Every mutating route ends with a workspace scan under the source "api", so
 * uploads show in the changes log as such and are not attributed to the next
 * exec.
 */
#include "daemon/daemon.h"
#include "daemon/domain.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/parse.h"

#define WORKSPACE "/home/user"
#define MAX_PATH_LEN 4096            /* as sandlot-init allows */
#define IO_CHUNK (64u * 1024)        /* one protocol DATA frame */
#define ARCHIVE_QUEUE_MAX (1u << 20) /* body bytes queued for the extractor */
#define ARCHIVE_MAX_SKIPPED 1000     /* "skipped" entries listed (all are counted) */
#define SKIPPED_NAME_MAX 256         /* bytes of an entry name echoed in "skipped" */
#define ARCHIVE_MAX_DEPTH 256        /* as the workspace scanner */

/* ---- shared helpers ------------------------------------------------------- */

static void count_bytes(uint64_t *counter, uint64_t n)
{
	__atomic_add_fetch(counter, n, __ATOMIC_RELAXED);
}

/* Take the sandbox of the request (params[0]) and its live handle.  On
 * failure the request is answered (404/410) and NULL returned; on success
 * the caller owns one dsb_get() reference. */
static struct dsb *get_sandbox(struct http_req *req, sandlot_t **sb)
{
	struct dsb *s = dsb_get(req->d, req, req->params[0]);
	if (!s)
		return NULL;
	sandlot_error_t *err = NULL;
	if (!(*sb = domain_sandbox_handle(s, &err))) {
		http_error_from(req, err);
		sandlot_error_free(err);
		dsb_put(req->d, s);
		return NULL;
	}
	return s;
}

/* The "path" query parameter.  Missing or empty: dflt if given, else 400.
 * Over 4096 bytes: 400.  NULL when answered. */
static const char *path_param(struct http_req *req, const char *dflt)
{
	const char *p = http_query(req, "path");
	if (!p || !*p) {
		if (dflt)
			return dflt;
		http_error(req, 400, "bad_request", "missing query parameter \"path\"");
		return NULL;
	}
	if (strlen(p) > MAX_PATH_LEN) {
		http_error(req, 400, "bad_request", "path longer than %d bytes", MAX_PATH_LEN);
		return NULL;
	}
	return p;
}

/* An octal "mode" query parameter (digits 0-7 only, value <= 07777), or dflt
 * when absent.  0 or -1 (answered 400). */
static int mode_param(struct http_req *req, uint32_t dflt, uint32_t *out)
{
	const char *v = http_query(req, "mode");
	if (!v) {
		*out = dflt;
		return 0;
	}
	uint32_t m = 0;
	const char *p = v;
	for (; *p; p++) {
		if (*p < '0' || *p > '7')
			break;
		m = m * 8 + (uint32_t)(*p - '0');
		if (m > 07777)
			break;
	}
	if (!*v || *p) {
		http_error(req, 400, "bad_request", "mode must be octal digits, at most 07777");
		return -1;
	}
	*out = m;
	return 0;
}

/* The size limit of a download: --max-download (0: none), lowered by the
 * request's ?max_bytes= (a size: "1048576", "10M"; never raised by it).
 * *who says which of them it is, for messages.  0, or -1 answered 400. */
static int download_limit(struct http_req *req, uint64_t *limit, const char **who)
{
	*limit = req->d->cfg.max_download;
	*who = "sandlotd --max-download";
	const char *v = http_query(req, "max_bytes");
	if (!v)
		return 0;
	uint64_t asked;
	sandlot_error_t *e = NULL;
	if (sandlot__parse_size(v, 0, &asked, &e) < 0) {
		http_error(req, 400, "bad_request", "max_bytes: %s", sandlot_error_message(e));
		sandlot_error_free(e);
		return -1;
	}
	if (!*limit || asked < *limit) {
		*limit = asked;
		*who = "the request's max_bytes";
	}
	return 0;
}

/* 413 too_large for a download over its limit, before any data: `what`
 * names the size and the limit, `who` which limit it is. */
static int answer_too_large(struct http_req *req, const char *what, const char *who)
{
	return http_error(req, 413, "too_large", "%s (the limit is %s)", what, who);
}

/* "0"/"false" or absent → 0, "1"/"true" → 1, else 400 (-1). */
static int flag_param(struct http_req *req, const char *name)
{
	return daemon_query_flag(req, name);
}

/* The absolute form of a sandbox path for answers: relative paths are
 * under /home/user; trailing slashes go.  The path is not otherwise
 * normalised ("..", symlinks): init resolves it.  Caller frees. */
static char *display_path(const char *p)
{
	size_t n = strlen(p);
	while (n > 1 && p[n - 1] == '/')
		n--;
	char *out;
	if (p[0] == '/') {
		out = strndup(p, n);
	} else if (asprintf(&out, WORKSPACE "/%.*s", (int)n, p) < 0) {
		out = NULL;
	}
	return out;
}

/* dir + "/" + name, without doubling a slash.  Caller frees (NULL on OOM). */
static char *join_path(const char *dir, const char *name)
{
	if (!dir || !*dir)
		return strdup(name);
	size_t n = strlen(dir);
	char *out;
	if (asprintf(&out, "%s%s%s", dir, dir[n - 1] == '/' ? "" : "/", name) < 0)
		return NULL;
	return out;
}

/* Record what a file route changed, under the source "api".  A failed scan
 * only costs the log entries; the file operation itself succeeded. */
static void scan_api(struct daemon *d, struct dsb *s)
{
	sandlot_error_t *err = NULL;
	if (dsb_scan_changes(d, s, "api", NULL, NULL, &err) < 0) {
		daemon_log("changes_scan_failed", "sandbox=%s error=\"%s\"", s->id,
			   err ? sandlot_error_message(err) : "?");
		sandlot_error_free(err);
	}
}

/* Answer from a sandlot error (not freed): http_error_from(). */
static int answer_status(struct http_req *req, const sandlot_error_t *err)
{
	return err ? http_error_from(req, err) : http_error(req, 500, "internal", "internal error");
}

/* answer_status() and free err.  Returns 0. */
static int answer_error(struct http_req *req, sandlot_error_t *err)
{
	answer_status(req, err);
	sandlot_error_free(err);
	return 0;
}

static json_t *file_info(const char *name, const char *path, const sandlot_stat_t *st)
{
	char mode[8];
	snprintf(mode, sizeof(mode), "%04o", st->mode & 07777);
	return json_pack("{s:o, s:o, s:s, s:I, s:I, s:s, s:o}",
			 "name", json_text(name, strlen(name)),
			 "path", json_text(path, strlen(path)),
			 "type", json_file_type((char)st->type),
			 "size", (json_int_t)st->size,
			 "allocated", (json_int_t)st->allocated,
			 "mode", mode,
			 "modified_at", json_time(st->mtime_ns / 1000000));
}

static int dirent_cmp(const void *a, const void *b)
{
	return strcmp(((const sandlot_dirent_t *)a)->name, ((const sandlot_dirent_t *)b)->name);
}

/* By name (an empty listing may come as NULL, which qsort must not see). */
static void sort_dirents(sandlot_dirent_t *ents, size_t n)
{
	if (n > 1)
		qsort(ents, n, sizeof(*ents), dirent_cmp);
}

/* ---- PUT .../files: raw body → file ---------------------------------------
 *
 * begin opens a writer (init creates a temporary file next to the target,
 * parents first); chunks are coalesced into 64 KiB and sent as they come;
 * end commits (init fsyncs and renames).  Any failure — an error from the
 * sandbox mid-body (ENOSPC → 507), the client going away — aborts the
 * writer, and init removes its temporary file: no partial file is left. */

struct put_state {
	struct dsb *s;
	sandlot_file_writer_t *w;
	const char *path;
	uint64_t size;
	size_t len;             /* bytes in buf */
	char buf[IO_CHUNK];
};

static void put_free(struct http_req *req, struct put_state *st)
{
	if (st->w)
		sandlot_file_writer_abort(st->w);
	dsb_put(req->d, st->s);
	free(st);
	req->state = NULL;
}

static int put_begin(struct http_req *req)
{
	sandlot_t *sb;
	struct dsb *s = get_sandbox(req, &sb);
	if (!s)
		return -1;
	uint32_t mode;
	const char *path = path_param(req, NULL);
	if (!path || mode_param(req, 0644, &mode) < 0) {
		dsb_put(req->d, s);
		return -1;
	}
	struct put_state *st = malloc(sizeof(*st));
	if (!st) {
		dsb_put(req->d, s);
		http_error(req, 500, "internal", "out of memory");
		return -1;
	}
	st->s = s;
	st->path = path;
	st->size = 0;
	st->len = 0;
	sandlot_error_t *err = NULL;
	st->w = sandlot_file_open_write(sb, path, mode, SANDLOT_WRITE_MKDIRS, &err);
	if (!st->w) {
		answer_error(req, err);
		put_free(req, st);
		return -1;
	}
	req->state = st;
	return 0;
}

/* Send data to the writer; on failure answer, abort and free.  0 or -1. */
static int put_send(struct http_req *req, struct put_state *st, const char *data, size_t len)
{
	sandlot_error_t *err = NULL;
	if (sandlot_file_writer_write(st->w, data, len, &err) == 0)
		return 0;
	answer_error(req, err);
	put_free(req, st); /* aborts the writer: init drops its temporary file */
	return -1;
}

static int put_chunk(struct http_req *req, const char *data, size_t len)
{
	struct put_state *st = req->state;
	if (!st)
		return -1;
	st->size += len;
	count_bytes(&req->d->m.bytes_uploaded, len);
	if (st->len + len < sizeof(st->buf)) {
		memcpy(st->buf + st->len, data, len);
		st->len += len;
		return 0;
	}
	if (st->len > 0) {
		size_t k = sizeof(st->buf) - st->len;
		memcpy(st->buf + st->len, data, k);
		data += k;
		len -= k;
		st->len = 0;
		if (put_send(req, st, st->buf, sizeof(st->buf)) < 0)
			return -1;
	}
	if (len >= sizeof(st->buf))
		return put_send(req, st, data, len);
	memcpy(st->buf, data, len);
	st->len = len;
	return 0;
}

static int put_end(struct http_req *req)
{
	struct put_state *st = req->state;
	if (!st)
		return req->answered ? 0 : http_error(req, 500, "internal", "upload state lost");
	if (st->len > 0 && put_send(req, st, st->buf, st->len) < 0)
		return 0;
	sandlot_error_t *err = NULL;
	int rc = sandlot_file_writer_commit(st->w, &err);
	st->w = NULL;
	if (rc < 0) {
		answer_error(req, err);
	} else {
		scan_api(req->d, st->s);
		cleanup_free char *shown = display_path(st->path);
		http_json(req, 201, json_pack("{s:o, s:I}", "path",
					      json_text(shown ? shown : st->path,
							strlen(shown ? shown : st->path)),
					      "size", (json_int_t)st->size));
	}
	put_free(req, st);
	return 0;
}

static int put_abort(struct http_req *req)
{
	if (req->state)
		put_free(req, req->state);
	return 0;
}

/* ---- GET .../files: file → raw body --------------------------------------- */

struct get_state {
	struct daemon *d;
	struct dsb *s;
	sandlot_file_reader_t *r;
};

static ssize_t get_read(void *ud, char *buf, size_t max, struct http_wait *w)
{
	(void)w; /* a file read waits only for the sandbox */
	struct get_state *st = ud;
	sandlot_error_t *err = NULL;
	ssize_t n = sandlot_file_reader_read(st->r, buf, max, &err);
	if (n < 0) {
		/* Headers are gone: all we can do is cut the body short, which
		 * the client sees as a failed transfer (never a silent drop). */
		daemon_log("download_failed", "sandbox=%s error=\"%s\"", st->s->id,
			   err ? sandlot_error_message(err) : "?");
		sandlot_error_free(err);
		return -1;
	}
	count_bytes(&st->d->m.bytes_downloaded, (uint64_t)n);
	return n;
}

static void get_free(void *ud, int completed)
{
	struct get_state *st = ud;
	sandlot_file_reader_close(st->r); /* before the end: aborts inside the sandbox */
	dsb_put(st->d, st->s);
	free(st);
}

static int get_file(struct http_req *req)
{
	sandlot_t *sb;
	struct dsb *s = get_sandbox(req, &sb);
	if (!s)
		return 0;
	const char *path = path_param(req, NULL);
	uint64_t limit;
	const char *who;
	if (!path || download_limit(req, &limit, &who) < 0) {
		dsb_put(req->d, s);
		return 0;
	}
	struct get_state *st = malloc(sizeof(*st));
	if (!st) {
		dsb_put(req->d, s);
		return http_error(req, 500, "internal", "out of memory");
	}
	/* Opening waits for init to open the file, so ENOENT (404), EISDIR and
	 * EINVAL (400: directories, devices, FIFOs) and EFBIG (413: over the
	 * limit, a sparse file of terabytes say) are answered as errors before
	 * any byte of a 200.  A file that grows past the limit while it is
	 * sent cuts the stream (get_read). */
	sandlot_error_t *err = NULL;
	st->r = sandlot_file_open_read_max(sb, path, limit, &err);
	if (!st->r) {
		free(st);
		dsb_put(req->d, s);
		if (err && sandlot_error_status(err) == EFBIG) {
			answer_too_large(req, sandlot_error_message(err), who);
			sandlot_error_free(err);
			return 0;
		}
		return answer_error(req, err);
	}
	st->d = req->d;
	st->s = s;
	return http_stream(req, 200, "application/octet-stream", get_read, get_free, st);
}

/* ---- the domain's file calls (domain.h) --------------------------------------- */

json_t *domain_file_stat(struct daemon *d, struct dsb *s, const char *path, sandlot_error_t **err)
{
	(void)d;
	sandlot_t *sb = domain_sandbox_handle(s, err);
	sandlot_stat_t st;
	if (!sb || sandlot_stat(sb, path, &st, err) < 0)
		return NULL;
	cleanup_free char *shown = display_path(path);
	const char *p = shown ? shown : path;
	const char *slash = strrchr(p, '/');
	const char *name = slash && slash[1] ? slash + 1 : p;
	json_t *o = file_info(name, p, &st);
	if (!o)
		sandlot__error(err, ENOMEM, "out of memory");
	return o;
}

json_t *domain_file_list(struct daemon *d, struct dsb *s, const char *path, sandlot_error_t **err)
{
	(void)d;
	sandlot_t *sb = domain_sandbox_handle(s, err);
	sandlot_dirent_t *ents = NULL;
	size_t n = 0;
	if (!sb || sandlot_list(sb, path, &ents, &n, err) < 0)
		return NULL;
	sort_dirents(ents, n);
	cleanup_free char *shown = display_path(path);
	const char *dir = shown ? shown : path;
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++) {
		cleanup_free char *full = join_path(dir, ents[i].name);
		json_t *fi = full ? file_info(ents[i].name, full, &ents[i].st) : NULL;
		if (!fi || json_array_append_new(arr, fi) < 0) {
			json_decref(arr);
			arr = NULL;
		}
	}
	sandlot_dirents_free(ents, n);
	json_t *o = arr ? json_pack("{s:o, s:o}", "path", json_text(dir, strlen(dir)), "entries", arr)
			: NULL;
	if (!o)
		sandlot__error(err, ENOMEM, "out of memory");
	return o;
}

char *domain_file_mkdir(struct daemon *d, struct dsb *s, const char *path, uint32_t mode,
			sandlot_error_t **err)
{
	sandlot_t *sb = domain_sandbox_handle(s, err);
	if (!sb || sandlot_mkdir(sb, path, mode, SANDLOT_MKDIR_PARENTS, err) < 0)
		return NULL;
	scan_api(d, s);
	char *shown = display_path(path);
	if (!shown)
		sandlot__error(err, ENOMEM, "out of memory");
	return shown;
}

int domain_file_remove(struct daemon *d, struct dsb *s, const char *path, int recursive,
		       sandlot_error_t **err)
{
	sandlot_t *sb = domain_sandbox_handle(s, err);
	if (!sb)
		return -1;
	int rc = sandlot_remove(sb, path, recursive ? SANDLOT_REMOVE_RECURSIVE : 0, err);
	/* A recursive removal may have done part of its work. */
	if (rc == 0 || recursive)
		scan_api(d, s);
	if (rc < 0 && !recursive && err && sandlot_error_status(*err) == ENOTEMPTY)
		sandlot__error(err, ENOTEMPTY, "%s (use recursive=1)", sandlot_error_message(*err));
	return rc;
}

/* A growing buffer, the sink of domain_file_read(). */
struct membuf {
	char *data;
	size_t len, cap;
};

static int membuf_add(void *ud, const void *buf, size_t len)
{
	struct membuf *m = ud;
	if (m->len + len + 1 > m->cap) {
		size_t cap = m->cap ? m->cap : 4096;
		while (cap < m->len + len + 1)
			cap *= 2;
		char *n = realloc(m->data, cap);
		if (!n) {
			errno = ENOMEM;
			return -1;
		}
		m->data = n;
		m->cap = cap;
	}
	memcpy(m->data + m->len, buf, len);
	m->len += len;
	m->data[m->len] = '\0';
	return 0;
}

int domain_file_read(struct daemon *d, struct dsb *s, const char *path, uint64_t max, char **data,
		     size_t *len, sandlot_error_t **err)
{
	sandlot_t *sb = domain_sandbox_handle(s, err);
	if (!sb)
		return -1;
	uint64_t limit = d->cfg.max_download;
	if (max && (!limit || max < limit))
		limit = max;
	sandlot_file_reader_t *r = sandlot_file_open_read_max(sb, path, limit, err);
	if (!r)
		return -1;
	struct membuf m = { 0 };
	char buf[IO_CHUNK];
	ssize_t n;
	while ((n = sandlot_file_reader_read(r, buf, sizeof(buf), err)) > 0) {
		if (membuf_add(&m, buf, (size_t)n) < 0) {
			sandlot__error(err, ENOMEM, "read %s: out of memory", path);
			n = -1;
			break;
		}
	}
	sandlot_file_reader_close(r);
	if (n < 0) {
		free(m.data);
		return -1;
	}
	if (!m.data && !(m.data = calloc(1, 1)))
		return sandlot__error(err, ENOMEM, "out of memory");
	count_bytes(&d->m.bytes_downloaded, m.len);
	*data = m.data;
	*len = m.len;
	return 0;
}

int domain_file_write(struct daemon *d, struct dsb *s, const char *path, const void *data,
		      size_t len, uint32_t mode, sandlot_error_t **err)
{
	sandlot_t *sb = domain_sandbox_handle(s, err);
	if (!sb)
		return -1;
	sandlot_file_writer_t *w = sandlot_file_open_write(sb, path, mode, SANDLOT_WRITE_MKDIRS, err);
	if (!w)
		return -1;
	if (len && sandlot_file_writer_write(w, data, len, err) < 0) {
		sandlot_file_writer_abort(w);
		return -1;
	}
	if (sandlot_file_writer_commit(w, err) < 0)
		return -1;
	count_bytes(&d->m.bytes_uploaded, len);
	scan_api(d, s);
	return 0;
}

/* ---- stat, list, mkdir, delete ---------------------------------------------- */

static int stat_file(struct http_req *req)
{
	sandlot_t *sb;
	struct dsb *s = get_sandbox(req, &sb);
	if (!s)
		return 0;
	const char *path = path_param(req, NULL);
	if (path) {
		sandlot_error_t *err = NULL;
		json_t *o = domain_file_stat(req->d, s, path, &err);
		if (o)
			http_json(req, 200, o);
		else
			answer_error(req, err);
	}
	dsb_put(req->d, s);
	return 0;
}

static int list_dir(struct http_req *req)
{
	sandlot_t *sb;
	struct dsb *s = get_sandbox(req, &sb);
	if (!s)
		return 0;
	const char *path = path_param(req, NULL);
	if (path) {
		sandlot_error_t *err = NULL;
		json_t *o = domain_file_list(req->d, s, path, &err);
		if (o)
			http_json(req, 200, o);
		else
			answer_error(req, err);
	}
	dsb_put(req->d, s);
	return 0;
}

static int make_dir(struct http_req *req)
{
	sandlot_t *sb;
	struct dsb *s = get_sandbox(req, &sb);
	if (!s)
		return 0;
	uint32_t mode;
	const char *path = path_param(req, NULL);
	if (path && mode_param(req, 0755, &mode) == 0) {
		sandlot_error_t *err = NULL;
		cleanup_free char *made = domain_file_mkdir(req->d, s, path, mode, &err);
		if (!made)
			answer_error(req, err);
		else
			http_json(req, 201, json_pack("{s:o}", "path", json_text(made, strlen(made))));
	}
	dsb_put(req->d, s);
	return 0;
}

/* A non-empty directory without recursive=1 is a 409 conflict (the request
 * is well-formed; the state of the sandbox is in the way). */
static int delete_file(struct http_req *req)
{
	sandlot_t *sb;
	struct dsb *s = get_sandbox(req, &sb);
	if (!s)
		return 0;
	const char *path = path_param(req, NULL);
	int recursive = path ? flag_param(req, "recursive") : -1;
	if (recursive >= 0) {
		sandlot_error_t *err = NULL;
		if (domain_file_remove(req->d, s, path, recursive, &err) == 0)
			http_empty(req, 204);
		else
			answer_error(req, err);
	}
	dsb_put(req->d, s);
	return 0;
}

/* ---- POST .../files/archive: tar body → files under DIR ---------------------
 *
 * libarchive pulls its input and the HTTP layer pushes the body, so the
 * extraction runs on a helper thread.  chunk() copies each piece into a
 * queue (at most 1 MiB, it blocks while the queue is full: back-pressure
 * to the client) and the thread's read callback takes them out.  The
 * thread never answers the request: it records its outcome, and chunk()
 * (early failure: 507, 400) or end() answers after joining it.
 *
 * Entries: regular files are written through a sandlot_file_writer (mode &
 * 0777, atomic, parents created) and directories created with
 * sandlot_mkdir (mode & 0777, plus owner rwx so later entries can go in).
 * Skipped, with a reason in "skipped", and never fatal: absolute names,
 * names with a ".." component, symlinks, hard links, devices, FIFOs,
 * sockets, and entries the sandbox refuses for reasons of their own
 * (a directory where a file should go, a name too long).  Fatal: a body
 * that is not a (gzip/bzip2/xz/zstd-compressed) tar, or truncated → 400;
 * the disk quota → 507; the sandbox dying → 410.  After a fatal error the
 * entries extracted so far stay, but never a partial file: the writer of
 * the entry in progress is aborted. */

struct qchunk {
	struct qchunk *next;
	size_t len;
	char data[];
};

struct ain {
	struct daemon *d;
	struct dsb *s;
	sandlot_t *sb;
	char *dir;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* under lock */
	struct qchunk *head, *tail;
	size_t queued;
	int eof;                /* the whole body is queued */
	int cancel;             /* the client went away */
	int done;               /* the thread has finished */
	int failed;             /* ... with the error below */
	/* the thread's own, read by others only once done */
	struct qchunk *cur;     /* handed to libarchive, freed at the next read */
	sandlot_error_t *err;   /* sandbox error (failed) */
	char bad[300];          /* archive error, 400 (failed, err == NULL) */
	uint64_t files, dirs, bytes, nskipped;
	json_t *skipped;
};

static la_ssize_t ain_read(struct archive *a, void *ud, const void **buf)
{
	struct ain *st = ud;
	pthread_mutex_lock(&st->lock);
	free(st->cur);
	st->cur = NULL;
	while (!st->head && !st->eof && !st->cancel)
		pthread_cond_wait(&st->cond, &st->lock);
	if (st->cancel) {
		pthread_mutex_unlock(&st->lock);
		archive_set_error(a, ECANCELED, "the client went away");
		return -1;
	}
	struct qchunk *c = st->head;
	if (c) {
		st->head = c->next;
		if (!st->head)
			st->tail = NULL;
		st->queued -= c->len;
		pthread_cond_broadcast(&st->cond); /* room for chunk() */
	}
	pthread_mutex_unlock(&st->lock);
	if (!c)
		return 0;
	st->cur = c;
	*buf = c->data;
	return (la_ssize_t)c->len;
}

static void ain_skip(struct ain *st, const char *name, const char *reason)
{
	st->nskipped++;
	if (st->nskipped > ARCHIVE_MAX_SKIPPED)
		return;
	/* Names come from the archive: a pax header can make one megabytes
	 * long, so only its start is echoed. */
	size_t n = strlen(name);
	char *line;
	if (asprintf(&line, "%.*s%s: %s", (int)(n > SKIPPED_NAME_MAX ? SKIPPED_NAME_MAX : n), name,
		     n > SKIPPED_NAME_MAX ? "..." : "", reason) < 0)
		return;
	json_array_append_new(st->skipped, json_text(line, strlen(line)));
	free(line);
}

/* Errors about one entry that do not stop the extraction: the sandbox
 * refuses that name (something of another type in the way, too long, a
 * magic link), the rest of the archive may well be fine. */
static int entry_error_skippable(int status)
{
	switch (status) {
	case EISDIR:
	case ENOTDIR:
	case EEXIST:
	case EINVAL:
	case ENAMETOOLONG:
	case ELOOP:
	case ENOENT:
		return 1;
	default:
		return 0;
	}
}

/* The thread's fatal outcome for a sandbox error (steals err). */
static int ain_fail_sandbox(struct ain *st, sandlot_error_t *err)
{
	st->err = err;
	return -1;
}

static int ain_fail_archive(struct ain *st, struct archive *a, const char *what)
{
	const char *msg = archive_error_string(a);
	snprintf(st->bad, sizeof(st->bad), "%s: %s", what, msg ? msg : "malformed archive");
	return -1;
}

/* Clean an entry name into out: "./a//b/" → "a/b".  Returns NULL if usable
 * (out may be "" for the archive's root, which is skipped silently) or the
 * reason to refuse it. */
static const char *clean_name(const char *name, char *out, size_t outsz)
{
	if (name[0] == '/')
		return "absolute name refused";
	size_t o = 0;
	const char *p = name;
	while (*p) {
		const char *e = strchrnul(p, '/');
		size_t n = (size_t)(e - p);
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return "name with '..' refused";
		if (n > 0 && !(n == 1 && p[0] == '.')) {
			if (o + n + 2 > outsz)
				return "name too long";
			if (o)
				out[o++] = '/';
			memcpy(out + o, p, n);
			o += n;
		}
		p = *e ? e + 1 : e;
	}
	out[o] = 0;
	return NULL;
}

static const char *zeros(void)
{
	static const char z[IO_CHUNK];
	return z;
}

/* Write the data of the current (regular file) entry to path.  0: written
 * or skipped; -1: fatal (st->err or st->bad set). */
static int ain_file(struct ain *st, struct archive *a, struct archive_entry *e, const char *name,
		    const char *path)
{
	sandlot_error_t *err = NULL;
	uint32_t mode = archive_entry_perm(e) & 0777;
	sandlot_file_writer_t *w = sandlot_file_open_write(st->sb, path, mode, SANDLOT_WRITE_MKDIRS,
							   &err);
	if (!w)
		goto sandbox_error;
	uint64_t off = 0;
	for (;;) {
		const void *buf;
		size_t size;
		la_int64_t offset;
		int r = archive_read_data_block(a, &buf, &size, &offset);
		if (r == ARCHIVE_EOF)
			break;
		if (r < ARCHIVE_WARN) {
			sandlot_file_writer_abort(w);
			return ain_fail_archive(st, a, name);
		}
		/* Sparse entries: holes come as gaps between blocks. */
		while (offset > 0 && (uint64_t)offset > off) {
			size_t k = (uint64_t)offset - off < IO_CHUNK ? (size_t)((uint64_t)offset - off)
								     : IO_CHUNK;
			if (sandlot_file_writer_write(w, zeros(), k, &err) < 0)
				goto write_error;
			off += k;
		}
		if (size > 0 && sandlot_file_writer_write(w, buf, size, &err) < 0)
			goto write_error;
		off += size;
	}
	/* A sparse file may end in a hole. */
	while (archive_entry_size_is_set(e) && (uint64_t)archive_entry_size(e) > off) {
		uint64_t left = (uint64_t)archive_entry_size(e) - off;
		size_t k = left < IO_CHUNK ? (size_t)left : IO_CHUNK;
		if (sandlot_file_writer_write(w, zeros(), k, &err) < 0)
			goto write_error;
		off += k;
	}
	if (sandlot_file_writer_commit(w, &err) < 0)
		goto sandbox_error;
	st->files++;
	st->bytes += off;
	return 0;

write_error:
	sandlot_file_writer_abort(w);
sandbox_error:
	if (err && entry_error_skippable(sandlot_error_status(err))) {
		ain_skip(st, name, sandlot_error_message(err));
		sandlot_error_free(err);
		return 0; /* the next header skips the rest of the data */
	}
	return ain_fail_sandbox(st, err);
}

static int ain_entry(struct ain *st, struct archive *a, struct archive_entry *e)
{
	const char *name = archive_entry_pathname(e);
	if (!name)
		name = archive_entry_pathname_utf8(e);
	if (!name) {
		ain_skip(st, "?", "unreadable name");
		return 0;
	}
	char clean[MAX_PATH_LEN + 1];
	const char *why = clean_name(name, clean, sizeof(clean));
	if (why) {
		ain_skip(st, name, why);
		return 0;
	}
	if (!clean[0])
		return 0; /* "./": DIR itself, which exists */
	if (archive_entry_hardlink(e)) {
		ain_skip(st, name, "hard link skipped");
		return 0;
	}
	const char *kind = NULL;
	switch (archive_entry_filetype(e)) {
	case AE_IFREG:
	case AE_IFDIR:
		break;
	case AE_IFLNK:
		kind = "symbolic link skipped";
		break;
	case AE_IFCHR:
	case AE_IFBLK:
		kind = "device skipped";
		break;
	case AE_IFIFO:
		kind = "FIFO skipped";
		break;
	case AE_IFSOCK:
		kind = "socket skipped";
		break;
	default:
		kind = "unsupported entry type skipped";
		break;
	}
	if (kind) {
		ain_skip(st, name, kind);
		return 0;
	}
	cleanup_free char *path = join_path(st->dir, clean);
	if (!path || strlen(path) > MAX_PATH_LEN) {
		ain_skip(st, name, "name too long");
		return 0;
	}
	if (archive_entry_filetype(e) == AE_IFREG)
		return ain_file(st, a, e, name, path);
	sandlot_error_t *err = NULL;
	uint32_t mode = (archive_entry_perm(e) & 0777) | 0700;
	if (sandlot_mkdir(st->sb, path, mode, SANDLOT_MKDIR_PARENTS, &err) < 0) {
		if (entry_error_skippable(sandlot_error_status(err))) {
			ain_skip(st, name, sandlot_error_message(err));
			sandlot_error_free(err);
			return 0;
		}
		return ain_fail_sandbox(st, err);
	}
	st->dirs++;
	return 0;
}

static void *ain_thread(void *ud)
{
	struct ain *st = ud;
	int rc = 0;
	struct archive *a = archive_read_new();
	if (!a) {
		snprintf(st->bad, sizeof(st->bad), "out of memory");
		rc = -1;
		goto out;
	}
	/* tar only, compressed or not.  Filters are named one by one: _all
	 * would also allow those that fork external programs (lzop, lrzip...). */
	archive_read_support_format_tar(a);
	archive_read_support_format_empty(a);
	archive_read_support_filter_gzip(a);
	archive_read_support_filter_bzip2(a);
	archive_read_support_filter_xz(a);
	archive_read_support_filter_zstd(a);
	if (archive_read_open(a, st, NULL, ain_read, NULL) != ARCHIVE_OK) {
		rc = ain_fail_archive(st, a, "not a tar archive");
		goto out;
	}
	for (;;) {
		struct archive_entry *e;
		int r = archive_read_next_header(a, &e);
		if (r == ARCHIVE_EOF)
			break;
		if (r < ARCHIVE_WARN) {
			rc = ain_fail_archive(st, a, st->files + st->dirs + st->nskipped
					      ? "bad archive" : "not a tar archive");
			break;
		}
		if ((rc = ain_entry(st, a, e)) < 0)
			break;
	}
out:
	archive_read_free(a);
	pthread_mutex_lock(&st->lock);
	st->failed = rc < 0;
	st->done = 1;
	pthread_cond_broadcast(&st->cond);
	pthread_mutex_unlock(&st->lock);
	return NULL;
}

static void ain_free(struct http_req *req, struct ain *st)
{
	while (st->head) {
		struct qchunk *c = st->head;
		st->head = c->next;
		free(c);
	}
	free(st->cur);
	sandlot_error_free(st->err);
	json_decref(st->skipped);
	free(st->dir);
	pthread_mutex_destroy(&st->lock);
	pthread_cond_destroy(&st->cond);
	dsb_put(req->d, st->s);
	free(st);
	req->state = NULL;
}

/* Wait for the thread (already told to finish), record what it did, answer
 * (unless the client is gone) and free.  Always returns 0. */
static int ain_finish(struct http_req *req, struct ain *st, int answer)
{
	pthread_join(st->thread, NULL);
	scan_api(st->d, st->s);
	if (!answer) {
		/* client gone */
	} else if (st->failed && st->err) {
		answer_status(req, st->err);
	} else if (st->failed && st->bad[0]) {
		http_error(req, 400, "bad_request", "%s", st->bad);
	} else if (st->failed) {
		http_error(req, 500, "internal", "extraction failed");
	} else {
		json_t *body = json_pack("{s:I, s:I, s:I, s:O, s:I}",
					 "files", (json_int_t)st->files,
					 "directories", (json_int_t)st->dirs,
					 "bytes", (json_int_t)st->bytes,
					 "skipped", st->skipped,
					 "skipped_count", (json_int_t)st->nskipped);
		if (body)
			http_json(req, 200, body);
		else
			http_error(req, 500, "internal", "out of memory");
	}
	ain_free(req, st);
	return 0;
}

static int ain_begin(struct http_req *req)
{
	sandlot_t *sb;
	struct dsb *s = get_sandbox(req, &sb);
	if (!s)
		return -1;
	const char *dir = path_param(req, WORKSPACE);
	if (!dir) {
		dsb_put(req->d, s);
		return -1;
	}
	/* DIR first, so a bad one (a file, a read-only place) is answered
	 * before the body. */
	sandlot_error_t *err = NULL;
	if (sandlot_mkdir(sb, dir, 0755, SANDLOT_MKDIR_PARENTS, &err) < 0) {
		answer_error(req, err);
		dsb_put(req->d, s);
		return -1;
	}
	struct ain *st = calloc(1, sizeof(*st));
	if (!st || !(st->dir = strdup(dir)) || !(st->skipped = json_array())) {
		if (st) {
			free(st->dir);
			free(st);
		}
		dsb_put(req->d, s);
		http_error(req, 500, "internal", "out of memory");
		return -1;
	}
	st->d = req->d;
	st->s = s;
	st->sb = sb;
	pthread_mutex_init(&st->lock, NULL);
	pthread_cond_init(&st->cond, NULL);
	int e = pthread_create(&st->thread, NULL, ain_thread, st);
	if (e) {
		/* join would fail: clean up by hand */
		json_decref(st->skipped);
		free(st->dir);
		pthread_mutex_destroy(&st->lock);
		pthread_cond_destroy(&st->cond);
		free(st);
		dsb_put(req->d, s);
		http_error(req, 500, "internal", "cannot start the extractor: %s", strerror(e));
		return -1;
	}
	req->state = st;
	return 0;
}

static void ain_stop(struct ain *st)
{
	pthread_mutex_lock(&st->lock);
	st->cancel = 1;
	pthread_cond_broadcast(&st->cond);
	pthread_mutex_unlock(&st->lock);
}

static int ain_chunk(struct http_req *req, const char *data, size_t len)
{
	struct ain *st = req->state;
	if (!st)
		return -1;
	count_bytes(&req->d->m.bytes_uploaded, len);
	struct qchunk *c = malloc(sizeof(*c) + len);
	if (!c) {
		ain_stop(st);
		pthread_join(st->thread, NULL);
		scan_api(st->d, st->s);
		http_error(req, 500, "internal", "out of memory");
		ain_free(req, st);
		return -1;
	}
	c->next = NULL;
	c->len = len;
	memcpy(c->data, data, len);
	pthread_mutex_lock(&st->lock);
	while (st->queued >= ARCHIVE_QUEUE_MAX && !st->done)
		pthread_cond_wait(&st->cond, &st->lock);
	if (st->done) {
		/* The thread no longer reads: it failed (answer now, without
		 * waiting for the rest of the body), or the archive ended
		 * before the body did (ignore the trailing bytes). */
		pthread_mutex_unlock(&st->lock);
		free(c);
		if (!st->failed)
			return 0;
		ain_finish(req, st, 1);
		return -1;
	}
	if (st->tail)
		st->tail->next = c;
	else
		st->head = c;
	st->tail = c;
	st->queued += len;
	pthread_cond_broadcast(&st->cond);
	pthread_mutex_unlock(&st->lock);
	return 0;
}

static int ain_end(struct http_req *req)
{
	struct ain *st = req->state;
	if (!st)
		return req->answered ? 0 : http_error(req, 500, "internal", "upload state lost");
	pthread_mutex_lock(&st->lock);
	st->eof = 1;
	pthread_cond_broadcast(&st->cond);
	pthread_mutex_unlock(&st->lock);
	return ain_finish(req, st, 1);
}

static int ain_abort(struct http_req *req)
{
	struct ain *st = req->state;
	if (!st)
		return 0;
	ain_stop(st);
	return ain_finish(req, st, 0);
}

/* ---- GET .../files/archive: DIR → tar ----------------------------------------
 *
 * Produced lazily on a worker thread: each time the HTTP layer wants bytes
 * and the output buffer is empty, one step runs — the next header
 * (listing a directory or opening a file first), or the next 64 KiB of the
 * file being sent — and libarchive's write callback appends to the buffer.
 * Memory: one buffer of about 64 KiB plus the listings of the directories
 * on the current path.
 *
 * Names are relative to DIR ("sub/file"), depth first, sorted.  Regular
 * files and directories only: symlinks are omitted (sandlot has no
 * readlink, and a link's target means nothing outside the sandbox anyway),
 * as are devices, FIFOs and sockets, and files and directories the sandbox
 * user may not read (logged as archive_entry_unreadable).  Entries that vanish between the
 * listing and the read are left out; any other error cuts the stream short
 * (the client sees a failed transfer, never a silently incomplete tar).  A
 * file that changes size while it is read is truncated or zero-padded to
 * the size in its header (read no further than that size: a file that
 * keeps growing does not make the archive endless). */

struct aout_level {
	char *rel;                /* path relative to DIR, NULL for DIR itself */
	sandlot_dirent_t *ents;
	size_t n, i;
};

struct aout {
	struct daemon *d;
	struct dsb *s;
	sandlot_t *sb;
	char *root;
	struct archive *a;
	struct archive_entry *e;
	struct aout_level *stack;
	size_t depth, cap;
	sandlot_file_reader_t *r;   /* file whose data is being sent */
	uint64_t left;              /* bytes of it the header still announces */
	uint64_t limit;             /* file data the download may send, 0 = any */
	uint64_t total;             /* file data announced in headers so far */
	int closed;                 /* the end-of-archive was written */
	int error;
	int discard;                /* aout_free: refuse every further byte */
	char *out;
	size_t out_len, out_off, out_cap;
	char io[IO_CHUNK];
};

static la_ssize_t aout_write(struct archive *a, void *ud, const void *buf, size_t n)
{
	struct aout *st = ud;
	if (st->discard) {
		/* The stream is over (cut): nothing more is produced, not even
		 * the zeros that would pad the entry in progress. */
		archive_set_error(a, EPIPE, "the archive stream has ended");
		return -1;
	}
	if (st->out_len + n > st->out_cap) {
		size_t cap = st->out_cap ? st->out_cap : 2 * IO_CHUNK;
		while (cap < st->out_len + n)
			cap *= 2;
		char *nb = realloc(st->out, cap);
		if (!nb) {
			archive_set_error(a, ENOMEM, "out of memory");
			return -1;
		}
		st->out = nb;
		st->out_cap = cap;
	}
	memcpy(st->out + st->out_len, buf, n);
	st->out_len += n;
	return (la_ssize_t)n;
}

static int aout_fail(struct aout *st, const char *what, const char *msg)
{
	daemon_log("archive_download_failed", "sandbox=%s dir=\"%s\" entry=\"%s\" error=\"%s\"",
		   st->s->id, st->root, what, msg ? msg : "?");
	st->error = 1;
	return -1;
}

/* An entry the sandbox user may not read (the file routes have the user's
 * rights: creds.c in sandlot-init) is left out, as symlinks are, and
 * logged. */
static void aout_unreadable(struct aout *st, const char *rel)
{
	daemon_log("archive_entry_unreadable", "sandbox=%s dir=\"%s\" entry=\"%s\"", st->s->id,
		   st->root, rel);
}

static void aout_header(struct aout *st, const char *rel, const sandlot_stat_t *s)
{
	struct archive_entry *e = archive_entry_clear(st->e);
	/* Names are bytes, as the sandbox's filesystem holds them.  (Not
	 * archive_entry_set_pathname_utf8(): in the C locale libarchive 3.6's
	 * pax writer then finds no multibyte form and crashes.)  The pax
	 * writer records a UTF-8 name as such, or, when the locale cannot
	 * convert it, as raw bytes marked hdrcharset=BINARY, which tar and
	 * Python's tarfile read back unchanged. */
	archive_entry_copy_pathname(e, rel);
	archive_entry_set_filetype(e, s->type == SANDLOT_DIR ? AE_IFDIR : AE_IFREG);
	archive_entry_set_perm(e, s->mode & 07777);
	archive_entry_set_size(e, s->type == SANDLOT_DIR ? 0 : (la_int64_t)s->size);
	archive_entry_set_mtime(e, s->mtime_ns / 1000000000, s->mtime_ns % 1000000000);
}

static int aout_push(struct aout *st, char *rel, sandlot_dirent_t *ents, size_t n)
{
	if (st->depth == st->cap) {
		size_t cap = st->cap ? st->cap * 2 : 16;
		struct aout_level *ns = realloc(st->stack, cap * sizeof(*ns));
		if (!ns)
			return -1;
		st->stack = ns;
		st->cap = cap;
	}
	sort_dirents(ents, n);
	st->stack[st->depth++] = (struct aout_level){ .rel = rel, .ents = ents, .n = n };
	return 0;
}

/* Produce the next piece of the archive.  0 or -1 (stream to be cut). */
static int aout_step(struct aout *st)
{
	sandlot_error_t *err = NULL;
	if (st->r) {
		/* Up to the size in the header: a file that grows while it is
		 * read (a log) must not make the archive endless. */
		ssize_t n = 0;
		if (st->left > 0) {
			size_t want = st->left < sizeof(st->io) ? (size_t)st->left : sizeof(st->io);
			n = sandlot_file_reader_read(st->r, st->io, want, &err);
		}
		if (n < 0) {
			aout_fail(st, "read", err ? sandlot_error_message(err) : NULL);
			sandlot_error_free(err);
			return -1;
		}
		if (n == 0) {
			/* Closing before its end aborts the read inside. */
			sandlot_file_reader_close(st->r);
			st->r = NULL;
			/* A file that shrank is padded with zeros, as tar does. */
			if (archive_write_finish_entry(st->a) < ARCHIVE_WARN)
				return aout_fail(st, "finish", archive_error_string(st->a));
			return 0;
		}
		st->left -= (uint64_t)n;
		if (archive_write_data(st->a, st->io, (size_t)n) < 0)
			return aout_fail(st, "data", archive_error_string(st->a));
		return 0;
	}
	if (st->depth == 0) {
		if (archive_write_close(st->a) != ARCHIVE_OK)
			return aout_fail(st, "close", archive_error_string(st->a));
		st->closed = 1;
		return 0;
	}
	struct aout_level *lv = &st->stack[st->depth - 1];
	if (lv->i == lv->n) {
		free(lv->rel);
		sandlot_dirents_free(lv->ents, lv->n);
		st->depth--;
		return 0;
	}
	sandlot_dirent_t *ent = &lv->ents[lv->i++];
	if (ent->st.type != SANDLOT_DIR && ent->st.type != SANDLOT_FILE)
		return 0; /* symlinks, devices, FIFOs, sockets: omitted */
	cleanup_free char *rel = join_path(lv->rel, ent->name);
	cleanup_free char *full = rel ? join_path(st->root, rel) : NULL;
	if (!full)
		return aout_fail(st, ent->name, "out of memory");
	if (ent->st.type == SANDLOT_DIR) {
		sandlot_dirent_t *ents = NULL;
		size_t n = 0;
		if (sandlot_list(st->sb, full, &ents, &n, &err) < 0) {
			int e = sandlot_error_status(err);
			if (e == ENOENT || e == ENOTDIR || e == EACCES) {
				if (e == EACCES)
					aout_unreadable(st, rel);
				sandlot_error_free(err);
				return 0; /* gone or replaced since the listing, or not the user's to read */
			}
			aout_fail(st, rel, sandlot_error_message(err));
			sandlot_error_free(err);
			return -1;
		}
		aout_header(st, rel, &ent->st);
		if (archive_write_header(st->a, st->e) < ARCHIVE_WARN) {
			sandlot_dirents_free(ents, n);
			return aout_fail(st, rel, archive_error_string(st->a));
		}
		if (st->depth >= ARCHIVE_MAX_DEPTH) {
			daemon_log("archive_depth_limit", "sandbox=%s entry=\"%s\"", st->s->id, rel);
			sandlot_dirents_free(ents, n);
			return 0;
		}
		if (aout_push(st, rel, ents, n) < 0) {
			sandlot_dirents_free(ents, n);
			return aout_fail(st, rel, "out of memory");
		}
		rel = NULL; /* owned by the stack now */
		return 0;
	}
	st->r = sandlot_file_open_read(st->sb, full, &err);
	if (!st->r) {
		int e = sandlot_error_status(err);
		if (e == ENOENT || e == EISDIR || e == EINVAL || e == EACCES) {
			if (e == EACCES)
				aout_unreadable(st, rel);
			sandlot_error_free(err);
			return 0; /* gone or no longer a regular file, or not the user's to read */
		}
		aout_fail(st, rel, sandlot_error_message(err));
		sandlot_error_free(err);
		return -1;
	}
	st->left = ent->st.size;
	/* Files grew since tree_size() summed them: the limit still holds
	 * (a cut stream, which no client takes for a whole archive). */
	st->total += ent->st.size;
	if (st->limit && st->total > st->limit) {
		char why[96];
		snprintf(why, sizeof(why), "the archive grew past the download limit of %llu bytes",
			 (unsigned long long)st->limit);
		sandlot_file_reader_close(st->r);
		st->r = NULL;
		return aout_fail(st, rel, why);
	}
	aout_header(st, rel, &ent->st);
	if (archive_write_header(st->a, st->e) < ARCHIVE_WARN) {
		sandlot_file_reader_close(st->r);
		st->r = NULL;
		return aout_fail(st, rel, archive_error_string(st->a));
	}
	return 0;
}

static ssize_t aout_read(void *ud, char *buf, size_t max, struct http_wait *w)
{
	(void)w; /* each step waits only for the sandbox */
	struct aout *st = ud;
	while (st->out_off == st->out_len) {
		st->out_off = st->out_len = 0;
		if (st->closed)
			return 0;
		if (st->error || aout_step(st) < 0)
			return -1;
	}
	size_t n = st->out_len - st->out_off;
	if (n > max)
		n = max;
	memcpy(buf, st->out + st->out_off, n);
	st->out_off += n;
	count_bytes(&st->d->m.bytes_downloaded, n);
	return (ssize_t)n;
}

static void aout_free(void *ud, int completed)
{
	struct aout *st = ud;
	sandlot_file_reader_close(st->r);
	if (st->a) {
		/* No end-of-archive after a cut: the writer fails its last
		 * writes and frees everything.  (Not archive_write_fail(): then
		 * libarchive does not close its output stage and leaks it.) */
		st->discard = !st->closed;
		archive_write_free(st->a);
	}
	archive_entry_free(st->e);
	while (st->depth > 0) {
		struct aout_level *lv = &st->stack[--st->depth];
		free(lv->rel);
		sandlot_dirents_free(lv->ents, lv->n);
	}
	free(st->stack);
	free(st->out);
	free(st->root);
	dsb_put(st->d, st->s);
	free(st);
}

/* Add the sizes of the regular files under dir (depth first, as the
 * archive walks it: directories the user may not read, or that vanished,
 * count for nothing) to *total, stopping as soon as it passes limit.
 * 0, or -1 with err. */
static int tree_size(sandlot_t *sb, const char *dir, const sandlot_dirent_t *ents, size_t n,
		     int depth, uint64_t limit, uint64_t *total, sandlot_error_t **err)
{
	for (size_t i = 0; i < n && *total <= limit; i++) {
		if (ents[i].st.type == SANDLOT_FILE) {
			*total += ents[i].st.size;
			continue;
		}
		if (ents[i].st.type != SANDLOT_DIR || depth + 1 >= ARCHIVE_MAX_DEPTH)
			continue;
		cleanup_free char *sub = join_path(dir, ents[i].name);
		if (!sub)
			return sandlot__error(err, ENOMEM, "out of memory");
		sandlot_dirent_t *below = NULL;
		size_t m = 0;
		sandlot_error_t *e = NULL;
		if (sandlot_list(sb, sub, &below, &m, &e) < 0) {
			int st = sandlot_error_status(e);
			if (st == ENOENT || st == ENOTDIR || st == EACCES) {
				sandlot_error_free(e);
				continue;
			}
			if (err)
				*err = e;
			else
				sandlot_error_free(e);
			return -1;
		}
		int rc = tree_size(sb, sub, below, m, depth + 1, limit, total, err);
		sandlot_dirents_free(below, m);
		if (rc < 0)
			return -1;
	}
	return 0;
}

static int aout_get(struct http_req *req)
{
	sandlot_t *sb;
	struct dsb *s = get_sandbox(req, &sb);
	if (!s)
		return 0;
	const char *dir = path_param(req, WORKSPACE);
	uint64_t limit;
	const char *who;
	if (!dir || download_limit(req, &limit, &who) < 0) {
		dsb_put(req->d, s);
		return 0;
	}
	/* The top listing before the 200: a missing DIR is a 404, a file a 400. */
	sandlot_dirent_t *ents = NULL;
	size_t n = 0;
	sandlot_error_t *err = NULL;
	if (sandlot_list(sb, dir, &ents, &n, &err) < 0) {
		dsb_put(req->d, s);
		return answer_error(req, err);
	}
	/* And the size of the files before the 200: one more listing of the
	 * tree, cheap next to sending it, so that an archive over the limit
	 * (a sparse file of terabytes, say) is a 413, not hours of zeros. */
	uint64_t total = 0;
	if (limit && (tree_size(sb, dir, ents, n, 1, limit, &total, &err) < 0 || total > limit)) {
		sandlot_dirents_free(ents, n);
		dsb_put(req->d, s);
		if (err)
			return answer_error(req, err);
		char what[256];
		snprintf(what, sizeof(what),
			 "the files under %.100s hold at least %llu bytes, over the download limit "
			 "of %llu bytes", dir, (unsigned long long)total, (unsigned long long)limit);
		return answer_too_large(req, what, who);
	}
	struct aout *st = calloc(1, sizeof(*st));
	if (!st) {
		sandlot_dirents_free(ents, n);
		dsb_put(req->d, s);
		return http_error(req, 500, "internal", "out of memory");
	}
	st->d = req->d;
	st->s = s;
	st->sb = sb;
	st->limit = limit;
	st->root = strdup(dir);
	st->a = archive_write_new();
	st->e = archive_entry_new();
	if (!st->root || !st->a || !st->e || aout_push(st, NULL, ents, n) < 0) {
		if (st->depth == 0)
			sandlot_dirents_free(ents, n);
		aout_free(st, 0);
		return http_error(req, 500, "internal", "out of memory");
	}
	/* pax restricted: plain ustar unless a name or size needs more.
	 * Unblocked output: no 10 KiB record buffering (and copying) inside
	 * libarchive; the end-of-archive blocks are still written. */
	if (archive_write_set_format_pax_restricted(st->a) != ARCHIVE_OK ||
	    archive_write_set_bytes_per_block(st->a, 0) != ARCHIVE_OK ||
	    archive_write_open(st->a, st, NULL, aout_write, NULL) != ARCHIVE_OK) {
		const char *msg = archive_error_string(st->a);
		http_error(req, 500, "internal", "tar writer: %s", msg ? msg : "?");
		aout_free(st, 0);
		return 0;
	}
	return http_stream(req, 200, "application/x-tar", aout_read, aout_free, st);
}

/* GET /v1/sandboxes/{id}/snapshot is this archive of /home/user
 * (workspaces.c). */
int files_archive_get(struct http_req *req)
{
	return aout_get(req);
}

/* ---- routes ------------------------------------------------------------------ */

int files_check_query(struct http_req *req)
{
	uint32_t mode;
	uint64_t limit;
	const char *who;
	if (!path_param(req, NULL) || mode_param(req, 0644, &mode) < 0 ||
	    flag_param(req, "recursive") < 0 || download_limit(req, &limit, &who) < 0)
		return -1;
	return 0;
}

const struct http_route file_routes[] = {
	{ "PUT", "/v1/sandboxes/{}/files", HTTP_RAW, put_begin, put_chunk, put_end, put_abort },
	{ "GET", "/v1/sandboxes/{}/files", HTTP_NOBODY, get_file, NULL, NULL, NULL },
	{ "DELETE", "/v1/sandboxes/{}/files", HTTP_NOBODY, delete_file, NULL, NULL, NULL },
	{ "GET", "/v1/sandboxes/{}/files/stat", HTTP_NOBODY, stat_file, NULL, NULL, NULL },
	{ "GET", "/v1/sandboxes/{}/files/list", HTTP_NOBODY, list_dir, NULL, NULL, NULL },
	{ "POST", "/v1/sandboxes/{}/files/mkdir", HTTP_NOBODY, make_dir, NULL, NULL, NULL },
	{ "POST", "/v1/sandboxes/{}/files/archive", HTTP_RAW, ain_begin, ain_chunk, ain_end,
	  ain_abort },
	{ "GET", "/v1/sandboxes/{}/files/archive", HTTP_NOBODY, aout_get, NULL, NULL, NULL },
	{ 0 },
};
