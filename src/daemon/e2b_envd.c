/* E2B's envd, answered by sandlotd (e2b_envd.h): the sandbox of a call,
 * Connect calls and their dispatch, filesystem.Filesystem, and envd's HTTP
 * routes /files and /health.
 *
 * Connect calls are RAW routes: the body (one message, at most
 * E2B_CONNECT_MAX_MESSAGE bytes) is collected, then decoded here, so that
 * every malformed request gets a Connect error rather than sandlotd's own
 * error shape.  The file upload is RAW too, streamed into libsandlot's file
 * writer, as one body of bytes (application/octet-stream) or as the parts
 * of a multipart/form-data form (libmicrohttpd's post processor, through
 * http_form_*()).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "daemon/e2b_envd.h"
#include "common/base64.h"
#include "common/cleanup.h"

#define LIST_MAX_ENTRIES 100000   /* ListDir: entries in one answer */
#define LIST_MAX_DEPTH 64
#define MOVE_TIMEOUT_MS 60000

/* ---- answers --------------------------------------------------------------- */

struct bytes_body {
	char *buf;
	size_t len, off;
};

static ssize_t bytes_read(void *ud, char *buf, size_t max, struct http_wait *w)
{
	(void)w;
	struct bytes_body *b = ud;
	size_t n = b->len - b->off < max ? b->len - b->off : max;
	memcpy(buf, b->buf + b->off, n);
	b->off += n;
	return (ssize_t)n;
}

static void bytes_free(void *ud, int completed)
{
	(void)completed;
	struct bytes_body *b = ud;
	free(b->buf);
	free(b);
}

int e2b_answer_bytes_with(struct http_req *req, const char *content_type, char *buf, size_t len,
			  const char *header, const char *value)
{
	struct bytes_body *b = calloc(1, sizeof(*b));
	if (!b) {
		free(buf);
		return http_error(req, 500, "internal", "out of memory");
	}
	b->buf = buf;
	b->len = len;
	struct http_resp *r = http_resp_stream(len, bytes_read, bytes_free, b);
	if (!r)
		return http_error(req, 500, "internal", "out of memory");
	if (http_resp_header(r, "Content-Type", content_type) < 0 ||
	    (header && http_resp_header(r, header, value) < 0)) {
		http_resp_free(r);
		return http_error(req, 500, "internal", "out of memory");
	}
	return http_resp_send(req, 200, r);
}

int e2b_answer_bytes(struct http_req *req, const char *content_type, char *buf, size_t len)
{
	struct bytes_body *b = calloc(1, sizeof(*b));
	if (!b) {
		free(buf);
		return http_error(req, 500, "internal", "out of memory");
	}
	b->buf = buf;
	b->len = len;
	return http_stream(req, 200, content_type, bytes_read, bytes_free, b);
}

static int answer_error_text(struct http_req *req, enum e2b_style style, const char *code,
			     const char *text)
{
	int status = e2b_connect_http_status(code);
	switch (style) {
	case E2B_STREAM: {
		size_t len;
		char *frame = e2b_connect_end_frame(code, text, &len);
		if (!frame)
			return http_error(req, 500, "internal", "out of memory");
		return e2b_answer_bytes(req, E2B_CONNECT_STREAM_TYPE, frame, len);
	}
	case E2B_UNARY:
		return http_json(req, status, e2b_connect_error_body(code, text));
	case E2B_PLAIN:
	default:
		return http_json(req, status, json_pack("{s:i, s:o}", "code", status, "message",
							json_text(text, strlen(text))));
	}
}

int e2b_answer_error(struct http_req *req, enum e2b_style style, const char *code,
		     const char *fmt, ...)
{
	char text[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	return answer_error_text(req, style, code, text);
}

int e2b_answer_sandlot(struct http_req *req, enum e2b_style style, sandlot_error_t *err,
		       const char *what)
{
	int status = err ? sandlot_error_status(err) : ENOMEM;
	const char *m = err ? sandlot_error_message(err) : "out of memory";
	int rc = e2b_answer_error(req, style, e2b_connect_code_from_errno(status), "%s%s%s",
				  what ? what : "", what ? ": " : "", m);
	sandlot_error_free(err);
	return rc;
}

/* ---- the sandbox of a call --------------------------------------------------- */

/* What E2B's proxy answers when it cannot reach a sandbox: 502 {"code",
 * "sandboxId", "message"}; the SDKs report the sandbox as no longer
 * running.  The id is the header as sent: any bytes. */
static void answer_proxy(struct http_req *req, const char *id, const char *message)
{
	http_json(req, 502, json_pack("{s:i, s:o, s:s}", "code", 502, "sandboxId",
				      json_text(id, strlen(id)), "message", message));
}

struct dsb *e2b_sandbox(struct http_req *req, enum e2b_style style, unsigned port,
			sandlot_t **sb)
{
	const char *id = http_header(req, "E2b-Sandbox-Id");
	const char *ps = http_header(req, "E2b-Sandbox-Port");
	if (!id || !*id) {
		e2b_answer_error(req, style, "invalid_argument",
				 "the request names no sandbox (send the E2b-Sandbox-Id header)");
		return NULL;
	}
	if (ps && (strtoul(ps, NULL, 10) != port || strspn(ps, "0123456789") != strlen(ps))) {
		answer_proxy(req, id, "nothing answers this path on that port of the sandbox");
		return NULL;
	}
	struct dsb *s = dsb_find(req->d, id);
	enum dsb_state state = DSB_DELETED;
	if (s) {
		pthread_mutex_lock(&s->lock);
		state = s->state;
		pthread_mutex_unlock(&s->lock);
		dsb_release(req->d, s);
	}
	if (!s || (state != DSB_RUNNING && state != DSB_PAUSED)) {
		/* What E2B's proxy answers for a sandbox it does not know: the
		 * SDKs report that the sandbox is no longer running. */
		answer_proxy(req, id, "The sandbox was not found");
		return NULL;
	}
	s = dsb_get(req->d, req, id); /* resumes a paused one that resumes on use */
	if (!s)
		return NULL;
	pthread_mutex_lock(&s->lock);
	*sb = s->state == DSB_RUNNING ? s->sb : NULL;
	pthread_mutex_unlock(&s->lock);
	if (!*sb) {
		dsb_put(req->d, s);
		answer_proxy(req, id, "The sandbox is not running");
		return NULL;
	}
	return s;
}

void e2b_scan_changes(struct daemon *d, struct dsb *s)
{
	sandlot_error_t *err = NULL;
	if (dsb_scan_changes(d, s, "api", NULL, NULL, &err) < 0) {
		daemon_log("changes_scan_failed", "sandbox=%s error=\"%s\"", s->id,
			   err ? sandlot_error_message(err) : "?");
		sandlot_error_free(err);
	}
}

char *e2b_abs_path(const char *path)
{
	size_t n = strlen(path);
	char *joined = malloc(sizeof(E2B_HOME) + n + 1);
	if (!joined)
		return NULL;
	if (path[0] == '/')
		memcpy(joined, path, n + 1);
	else
		sprintf(joined, "%s/%s", E2B_HOME, path);
	/* Clean it in place: segments are copied down, ".." drops the last. */
	char *out = joined;
	size_t o = 0;
	const char *p = joined;
	while (*p) {
		while (*p == '/')
			p++;
		const char *seg = p;
		while (*p && *p != '/')
			p++;
		size_t len = (size_t)(p - seg);
		if (len == 0 || (len == 1 && seg[0] == '.'))
			continue;
		if (len == 2 && seg[0] == '.' && seg[1] == '.') {
			while (o > 0 && out[o - 1] != '/')
				o--;
			if (o > 0)
				o--; /* the slash before it */
			continue;
		}
		out[o++] = '/';
		memmove(out + o, seg, len);
		o += len;
	}
	if (o == 0)
		out[o++] = '/';
	out[o] = '\0';
	return joined;
}

static const char *base_name(const char *abs)
{
	const char *slash = strrchr(abs, '/');
	return slash && slash[1] ? slash + 1 : abs;
}

/* The username of a call (?username= or the user of Authorization: Basic),
 * checked: E2B's sandboxes know "user" and "root"; sandlot runs every
 * call as the sandbox's one user, so either is accepted.  0, or -1 having
 * answered. */
static int check_user(struct http_req *req, enum e2b_style style, const char *user)
{
	char decoded[128];
	if (!user) {
		const char *auth = http_header(req, "Authorization");
		if (auth && strncasecmp(auth, "Basic ", 6) == 0) {
			const char *b64 = auth + 6;
			size_t n = strlen(b64);
			if (n > 160) {
				user = "";
			} else {
				ssize_t got = sandlot__base64_decode(b64, n, (unsigned char *)decoded);
				if (got < 0)
					got = 0;
				decoded[got] = '\0';
				char *colon = strchr(decoded, ':');
				if (colon)
					*colon = '\0';
				user = decoded;
			}
		}
	}
	if (!user || !*user || strcmp(user, "user") == 0 || strcmp(user, "root") == 0)
		return 0;
	e2b_answer_error(req, style, "unauthenticated",
			 "error looking up user '%.100s': unknown user (this sandbox has \"user\" "
			 "and \"root\")",
			 user);
	return -1;
}

/* ---- EntryInfo --------------------------------------------------------------- */

static const char *file_type_name(sandlot_file_type_t t)
{
	switch (t) {
	case SANDLOT_FILE:
		return "FILE_TYPE_FILE";
	case SANDLOT_DIR:
		return "FILE_TYPE_DIRECTORY";
	case SANDLOT_SYMLINK:
		return "FILE_TYPE_SYMLINK";
	default:
		return "FILE_TYPE_UNSPECIFIED";
	}
}

/* "drwxr-xr-x", as Go's FileMode.String() (what envd sends). */
static void permissions(const sandlot_stat_t *st, char out[11])
{
	static const char rwx[] = "rwxrwxrwx";
	out[0] = st->type == SANDLOT_DIR ? 'd' : st->type == SANDLOT_SYMLINK ? 'L' : '-';
	for (int i = 0; i < 9; i++)
		out[1 + i] = st->mode & (1u << (8 - i)) ? rwx[i] : '-';
	out[10] = '\0';
}

static json_t *timestamp(int64_t ns)
{
	time_t sec = (time_t)(ns / 1000000000);
	long frac = (long)(ns % 1000000000);
	if (frac < 0) {
		frac += 1000000000;
		sec--;
	}
	struct tm tm;
	char buf[64];
	if (!gmtime_r(&sec, &tm))
		return json_string("1970-01-01T00:00:00Z");
	size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
	if (frac)
		snprintf(buf + n, sizeof(buf) - n, ".%09ldZ", frac);
	else
		snprintf(buf + n, sizeof(buf) - n, "Z");
	return json_string(buf);
}

static json_t *entry_info(const char *abs, const sandlot_stat_t *st)
{
	char perms[11], size[24];
	permissions(st, perms);
	snprintf(size, sizeof(size), "%" PRIu64, st->size);
	/* names in the sandbox are any bytes: invalid UTF-8 shows as U+FFFD */
	const char *name = base_name(abs);
	return json_pack("{s:o, s:s, s:o, s:s, s:I, s:s, s:o}", "name", json_text(name, strlen(name)),
			 "type", file_type_name(st->type), "path", json_text(abs, strlen(abs)), "size",
			 size, "mode",
			 (json_int_t)(st->mode & 07777), "permissions", perms, "modifiedTime",
			 timestamp(st->mtime_ns));
}

/* ---- filesystem.Filesystem ----------------------------------------------------- */

/* The "path" of a message, made absolute; NULL having answered. */
static char *path_field(struct http_req *req, json_t *msg, const char *camel, const char *snake)
{
	int bad = 0;
	const char *p = e2b_pj_string(msg, camel, snake, &bad);
	if (bad || !p || !*p) {
		e2b_answer_error(req, E2B_UNARY, "invalid_argument", "%s: %s", camel,
				 bad ? "must be a string" : "a path is required");
		return NULL;
	}
	if (strlen(p) > 4096 || memchr(p, '\0', strlen(p) + 1) != p + strlen(p)) {
		e2b_answer_error(req, E2B_UNARY, "invalid_argument", "%s: the path is too long",
				 camel);
		return NULL;
	}
	char *abs = e2b_abs_path(p);
	if (!abs)
		e2b_answer_error(req, E2B_UNARY, "internal", "out of memory");
	return abs;
}

static int fs_stat(struct http_req *req, struct dsb *s, sandlot_t *sb, json_t *msg)
{
	(void)s;
	cleanup_free char *abs = path_field(req, msg, "path", NULL);
	if (!abs)
		return 0;
	sandlot_stat_t st;
	sandlot_error_t *err = NULL;
	if (sandlot_stat(sb, abs, &st, &err) < 0) {
		if (sandlot_error_status(err) == ENOENT) {
			sandlot_error_free(err);
			return e2b_answer_error(req, E2B_UNARY, "not_found",
						"file or directory not found: %s", abs);
		}
		return e2b_answer_sandlot(req, E2B_UNARY, err, abs);
	}
	return http_json(req, 200, json_pack("{s:o}", "entry", entry_info(abs, &st)));
}

struct lister {
	sandlot_t *sb;
	json_t *entries;
	unsigned depth;
	sandlot_error_t *err;
};

/* Add the entries of dir (at level, from 1) and, below depth, theirs. */
static int list_level(struct lister *l, const char *dir, unsigned level)
{
	sandlot_dirent_t *ents = NULL;
	size_t n = 0;
	if (sandlot_list(l->sb, dir, &ents, &n, &l->err) < 0)
		return -1;
	int rc = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		if (json_array_size(l->entries) >= LIST_MAX_ENTRIES) {
			rc = -2;
			break;
		}
		size_t len = strlen(dir) + strlen(ents[i].name) + 2;
		char *child = malloc(len);
		if (!child) {
			rc = -3;
			break;
		}
		snprintf(child, len, "%s%s%s", dir, strcmp(dir, "/") ? "/" : "", ents[i].name);
		json_array_append_new(l->entries, entry_info(child, &ents[i].st));
		if (ents[i].st.type == SANDLOT_DIR && level < l->depth) {
			if (list_level(l, child, level + 1) < 0) {
				/* a directory that went away or cannot be read is
				 * listed without its contents */
				if (l->err && (sandlot_error_status(l->err) == ENOENT ||
					       sandlot_error_status(l->err) == EACCES)) {
					sandlot_error_free(l->err);
					l->err = NULL;
				} else {
					rc = l->err ? -1 : -2;
				}
			}
		}
		free(child);
	}
	sandlot_dirents_free(ents, n);
	return rc;
}

static int fs_list(struct http_req *req, struct dsb *s, sandlot_t *sb, json_t *msg)
{
	(void)s;
	uint32_t depth;
	if (e2b_pj_uint32(msg, "depth", NULL, &depth) < 0)
		return e2b_answer_error(req, E2B_UNARY, "invalid_argument",
					"depth: must be an unsigned integer");
	if (depth == 0)
		depth = 1;
	if (depth > LIST_MAX_DEPTH)
		return e2b_answer_error(req, E2B_UNARY, "invalid_argument",
					"depth: at most %d levels", LIST_MAX_DEPTH);
	cleanup_free char *abs = path_field(req, msg, "path", NULL);
	if (!abs)
		return 0;
	sandlot_stat_t st;
	sandlot_error_t *err = NULL;
	if (sandlot_stat(sb, abs, &st, &err) < 0) {
		if (sandlot_error_status(err) == ENOENT) {
			sandlot_error_free(err);
			return e2b_answer_error(req, E2B_UNARY, "not_found",
						"directory not found: %s", abs);
		}
		return e2b_answer_sandlot(req, E2B_UNARY, err, abs);
	}
	if (st.type != SANDLOT_DIR)
		return e2b_answer_error(req, E2B_UNARY, "invalid_argument",
					"path is not a directory: %s", abs);
	struct lister l = { .sb = sb, .entries = json_array(), .depth = depth };
	int rc = list_level(&l, abs, 1);
	if (rc < 0) {
		json_decref(l.entries);
		if (rc == -2)
			return e2b_answer_error(req, E2B_UNARY, "resource_exhausted",
						"the listing is over %d entries: list with a "
						"smaller depth",
						LIST_MAX_ENTRIES);
		if (rc == -3)
			return e2b_answer_error(req, E2B_UNARY, "internal", "out of memory");
		return e2b_answer_sandlot(req, E2B_UNARY, l.err, abs);
	}
	return http_json(req, 200, json_pack("{s:o}", "entries", l.entries));
}

static int fs_mkdir(struct http_req *req, struct dsb *s, sandlot_t *sb, json_t *msg)
{
	cleanup_free char *abs = path_field(req, msg, "path", NULL);
	if (!abs)
		return 0;
	sandlot_stat_t st;
	sandlot_error_t *err = NULL;
	if (sandlot_stat(sb, abs, &st, &err) == 0) {
		if (st.type == SANDLOT_DIR)
			return e2b_answer_error(req, E2B_UNARY, "already_exists",
						"directory already exists: %s", abs);
		return e2b_answer_error(req, E2B_UNARY, "invalid_argument",
					"path already exists but it is not a directory: %s", abs);
	}
	sandlot_error_free(err);
	err = NULL;
	if (sandlot_mkdir(sb, abs, 0755, SANDLOT_MKDIR_PARENTS, &err) < 0 ||
	    sandlot_stat(sb, abs, &st, &err) < 0)
		return e2b_answer_sandlot(req, E2B_UNARY, err, abs);
	e2b_scan_changes(req->d, s);
	return http_json(req, 200, json_pack("{s:o}", "entry", entry_info(abs, &st)));
}

static int fs_remove(struct http_req *req, struct dsb *s, sandlot_t *sb, json_t *msg)
{
	cleanup_free char *abs = path_field(req, msg, "path", NULL);
	if (!abs)
		return 0;
	if (strcmp(abs, "/") == 0)
		return e2b_answer_error(req, E2B_UNARY, "invalid_argument",
					"refusing to remove the root directory");
	sandlot_error_t *err = NULL;
	if (sandlot_remove(sb, abs, SANDLOT_REMOVE_RECURSIVE, &err) < 0) {
		if (sandlot_error_status(err) == ENOENT) {
			sandlot_error_free(err);
			return e2b_answer_error(req, E2B_UNARY, "not_found",
						"file or directory not found: %s", abs);
		}
		return e2b_answer_sandlot(req, E2B_UNARY, err, abs);
	}
	e2b_scan_changes(req->d, s);
	return http_json(req, 200, json_object());
}

/* Move: libsandlot has no rename, so mv(1) does it inside the sandbox
 * (a command sandlotd itself runs, bounded by MOVE_TIMEOUT_MS). */
struct mv_out {
	char text[512];
	size_t len;
};

static int mv_output(void *ud, sandlot_stream_t stream, const void *data, size_t len)
{
	(void)stream;
	struct mv_out *o = ud;
	size_t room = sizeof(o->text) - 1 - o->len;
	size_t n = len < room ? len : room;
	memcpy(o->text + o->len, data, n);
	o->len += n;
	o->text[o->len] = '\0';
	return 0;
}

static int fs_move(struct http_req *req, struct dsb *s, sandlot_t *sb, json_t *msg)
{
	cleanup_free char *src = path_field(req, msg, "source", NULL);
	if (!src)
		return 0;
	cleanup_free char *dst = path_field(req, msg, "destination", NULL);
	if (!dst)
		return 0;
	sandlot_stat_t st;
	sandlot_error_t *err = NULL;
	if (sandlot_stat(sb, src, &st, &err) < 0) {
		if (sandlot_error_status(err) == ENOENT) {
			sandlot_error_free(err);
			return e2b_answer_error(req, E2B_UNARY, "not_found",
						"source not found: %s", src);
		}
		return e2b_answer_sandlot(req, E2B_UNARY, err, src);
	}
	/* envd creates the destination's parent directories */
	char *slash = strrchr(dst, '/');
	if (slash && slash != dst) {
		*slash = '\0';
		int rc = sandlot_mkdir(sb, dst, 0755, SANDLOT_MKDIR_PARENTS, &err);
		*slash = '/';
		if (rc < 0)
			return e2b_answer_sandlot(req, E2B_UNARY, err, dst);
	}
	struct mv_out out = { .len = 0 };
	const char *argv[] = { "mv", "-T", "-f", "--", src, dst, NULL };
	sandlot_exec_spec_t spec = { .size = sizeof(spec),
				     .argv = argv, .cwd = "/", .timeout_ms = MOVE_TIMEOUT_MS };
	sandlot_exec_callbacks_t cb = { .size = sizeof(cb),
					.on_output = mv_output, .userdata = &out };
	sandlot_proc_t *p = sandlot_exec(sb, &spec, &cb, &err);
	if (!p)
		return e2b_answer_sandlot(req, E2B_UNARY, err, "moving");
	sandlot_exit_t ex = { .size = sizeof(ex) };
	int rc = sandlot_proc_wait(p, &ex, &err);
	sandlot_proc_free(p);
	if (rc < 0)
		return e2b_answer_sandlot(req, E2B_UNARY, err, "moving");
	if (ex.exit_code != 0) {
		while (out.len > 0 && out.text[out.len - 1] == '\n')
			out.text[--out.len] = '\0';
		return e2b_answer_error(req, E2B_UNARY,
					ex.start_error ? "internal" : "invalid_argument",
					"cannot move %s to %s: %s", src, dst,
					ex.start_error ? ex.error : out.text);
	}
	e2b_scan_changes(req->d, s);
	if (sandlot_stat(sb, dst, &st, &err) < 0)
		return e2b_answer_sandlot(req, E2B_UNARY, err, dst);
	return http_json(req, 200, json_pack("{s:o}", "entry", entry_info(dst, &st)));
}

/* ---- Connect calls: collecting and dispatching ------------------------------------ */

struct connect_state {
	int stream;
	char *buf;
	size_t len, cap;
};

static void connect_free(struct http_req *req)
{
	struct connect_state *c = req->state;
	if (c) {
		free(c->buf);
		free(c);
	}
	req->state = NULL;
}

static int connect_begin(struct http_req *req)
{
	const char *ct = http_header(req, "Content-Type");
	int stream;
	if (ct && strncasecmp(ct, E2B_CONNECT_STREAM_TYPE, strlen(E2B_CONNECT_STREAM_TYPE)) == 0)
		stream = 1;
	else if (ct && strncasecmp(ct, "application/json", 16) == 0)
		stream = 0;
	else {
		http_json(req, 415,
			  e2b_connect_error_body("unknown",
						 "the Content-Type must be application/json "
						 "(unary) or application/connect+json (stream): "
						 "only Connect's JSON codec is served"));
		return -1;
	}
	struct connect_state *c = calloc(1, sizeof(*c));
	if (!c) {
		http_error(req, 500, "internal", "out of memory");
		return -1;
	}
	c->stream = stream;
	req->state = c;
	return 0;
}

static int connect_chunk(struct http_req *req, const char *data, size_t len)
{
	struct connect_state *c = req->state;
	size_t max = E2B_CONNECT_MAX_MESSAGE + E2B_ENVELOPE_HEADER;
	if (len > max - c->len) {
		int stream = c->stream;
		connect_free(req);
		e2b_answer_error(req, stream ? E2B_STREAM : E2B_UNARY, "resource_exhausted",
				 "the request message is over %u bytes", E2B_CONNECT_MAX_MESSAGE);
		return -1;
	}
	if (c->len + len > c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 4096;
		while (cap < c->len + len)
			cap *= 2;
		if (cap > max)
			cap = max;
		char *nb = realloc(c->buf, cap);
		if (!nb) {
			connect_free(req);
			http_error(req, 500, "internal", "out of memory");
			return -1;
		}
		c->buf = nb;
		c->cap = cap;
	}
	memcpy(c->buf + c->len, data, len);
	c->len += len;
	return 0;
}

static int connect_abort(struct http_req *req)
{
	connect_free(req);
	return 0;
}

/* Read the call's message and its headers into call; 0, or -1 answered. */
static int connect_read(struct http_req *req, struct e2b_call *call)
{
	struct connect_state *c = req->state;
	call->stream = c->stream;
	call->method = req->params[0];
	char msg[256];
	call->msg = e2b_connect_request(c->stream, c->buf, c->len, msg, sizeof(msg));
	connect_free(req);
	if (!call->msg) {
		e2b_answer_error(req, call->stream ? E2B_STREAM : E2B_UNARY, "invalid_argument",
				 "%s", msg);
		return -1;
	}
	const char *ka = http_header(req, "Keepalive-Ping-Interval");
	if (ka) {
		long v = strtol(ka, NULL, 10);
		call->keepalive_ms = v > 0 && v < 3600 ? (int)v * 1000 : 0;
	}
	const char *to = http_header(req, "Connect-Timeout-Ms");
	if (to) {
		long long v = strtoll(to, NULL, 10);
		call->timeout_ms = v > 0 ? (int64_t)v : 0;
	}
	return 0;
}

typedef int (*fs_fn)(struct http_req *req, struct dsb *s, sandlot_t *sb, json_t *msg);

static const struct {
	const char *name;
	fs_fn fn;
} fs_methods[] = {
	{ "Stat", fs_stat },     { "ListDir", fs_list }, { "MakeDir", fs_mkdir },
	{ "Remove", fs_remove }, { "Move", fs_move },
};

static int filesystem_end(struct http_req *req)
{
	struct e2b_call call = { 0 };
	if (connect_read(req, &call) < 0)
		return 0;
	enum e2b_style style = call.stream ? E2B_STREAM : E2B_UNARY;
	for (size_t i = 0; i < sizeof(fs_methods) / sizeof(fs_methods[0]); i++) {
		if (strcmp(fs_methods[i].name, call.method) != 0)
			continue;
		if (call.stream) {
			e2b_answer_error(req, style, "invalid_argument",
					 "filesystem.Filesystem/%s is a unary call", call.method);
			break;
		}
		sandlot_t *sb;
		struct dsb *s = check_user(req, style, NULL) < 0
					? NULL
					: e2b_sandbox(req, style, E2B_ENVD_PORT, &sb);
		if (s) {
			fs_methods[i].fn(req, s, sb, call.msg);
			dsb_put(req->d, s);
		}
		json_decref(call.msg);
		return 0;
	}
	if (!req->answered && e2b_watch_call(req, &call) == 1)
		e2b_answer_error(req, style, "unimplemented",
				 "filesystem.Filesystem/%s is not served by sandlotd", call.method);
	json_decref(call.msg);
	return 0;
}

static int process_end(struct http_req *req)
{
	struct e2b_call call = { 0 };
	if (connect_read(req, &call) < 0)
		return 0;
	if (check_user(req, call.stream ? E2B_STREAM : E2B_UNARY, NULL) == 0)
		e2b_process_call(req, &call);
	json_decref(call.msg);
	return 0;
}

/* ---- /files -------------------------------------------------------------------- */

static int files_path(struct http_req *req, char **abs)
{
	const char *p = http_query(req, "path");
	*abs = NULL;
	if (!p || !*p)
		return 0;
	if (strlen(p) > 4096) {
		e2b_answer_error(req, E2B_PLAIN, "invalid_argument", "the path is too long");
		return -1;
	}
	*abs = e2b_abs_path(p);
	if (!*abs) {
		e2b_answer_error(req, E2B_PLAIN, "internal", "out of memory");
		return -1;
	}
	return 0;
}

struct download {
	struct daemon *d;
	struct dsb *s;
	sandlot_file_reader_t *r;
};

static ssize_t download_read(void *ud, char *buf, size_t max, struct http_wait *w)
{
	(void)w;
	struct download *st = ud;
	sandlot_error_t *err = NULL;
	ssize_t n = sandlot_file_reader_read(st->r, buf, max, &err);
	if (n < 0) {
		daemon_log("e2b_download_failed", "sandbox=%s error=\"%s\"", st->s->id,
			   err ? sandlot_error_message(err) : "?");
		sandlot_error_free(err);
		return HTTP_STREAM_ERROR;
	}
	__atomic_add_fetch(&st->d->m.bytes_downloaded, (uint64_t)n, __ATOMIC_RELAXED);
	return n;
}

static void download_free(void *ud, int completed)
{
	(void)completed;
	struct download *st = ud;
	sandlot_file_reader_close(st->r);
	dsb_put(st->d, st->s);
	free(st);
}

static int files_get(struct http_req *req)
{
	cleanup_free char *abs = NULL;
	if (files_path(req, &abs) < 0 || check_user(req, E2B_PLAIN, http_query(req, "username")) < 0)
		return 0;
	if (!abs)
		return e2b_answer_error(req, E2B_PLAIN, "invalid_argument",
					"the path of the file is required (?path=)");
	sandlot_t *sb;
	struct dsb *s = e2b_sandbox(req, E2B_PLAIN, E2B_ENVD_PORT, &sb);
	if (!s)
		return 0;
	sandlot_error_t *err = NULL;
	sandlot_file_reader_t *r = sandlot_file_open_read_max(sb, abs, req->d->cfg.max_download,
							      &err);
	if (!r) {
		dsb_put(req->d, s);
		int status = sandlot_error_status(err);
		if (status == ENOENT) {
			sandlot_error_free(err);
			return e2b_answer_error(req, E2B_PLAIN, "not_found",
						"path '%s' does not exist", abs);
		}
		if (status == EISDIR) {
			sandlot_error_free(err);
			return e2b_answer_error(req, E2B_PLAIN, "invalid_argument",
						"path '%s' is a directory", abs);
		}
		return e2b_answer_sandlot(req, E2B_PLAIN, err, abs);
	}
	struct download *st = malloc(sizeof(*st));
	if (!st) {
		sandlot_file_reader_close(r);
		dsb_put(req->d, s);
		return e2b_answer_error(req, E2B_PLAIN, "internal", "out of memory");
	}
	st->d = req->d;
	st->s = s;
	st->r = r;
	return http_stream(req, 200, "application/octet-stream", download_read, download_free, st);
}

/* An upload: one file (octet-stream), or the file parts of a form. */
struct upload {
	struct dsb *s;
	sandlot_t *sb;
	char *path;                  /* ?path=, absolute; NULL if not given */
	struct http_form *form;      /* multipart; NULL: the body is the file */
	sandlot_file_writer_t *w;    /* the file being written */
	char *wpath;                 /* its path */
	unsigned parts;
	uint64_t part_end;           /* off + len of the last piece */
	char *part_name;             /* filename of the part being written */
	json_t *written;             /* [{"name", "type", "path"}] */
	sandlot_error_t *err;        /* why it failed (form callback) */
	char problem[256];           /* or this */
};

static void upload_free(struct http_req *req)
{
	struct upload *u = req->state;
	if (!u)
		return;
	if (u->form)
		http_form_free(u->form);
	if (u->w)
		sandlot_file_writer_abort(u->w);
	free(u->wpath);
	free(u->part_name);
	free(u->path);
	json_decref(u->written);
	sandlot_error_free(u->err);
	if (u->s)
		dsb_put(req->d, u->s);
	free(u);
	req->state = NULL;
}

/* Commit the file being written: 0, or -1 with u->err. */
static int upload_commit(struct upload *u)
{
	if (!u->w)
		return 0;
	int rc = sandlot_file_writer_commit(u->w, &u->err);
	u->w = NULL;
	if (rc < 0)
		return -1;
	const char *name = base_name(u->wpath);
	json_array_append_new(u->written,
			      json_pack("{s:o, s:s, s:o}", "name", json_text(name, strlen(name)), "type",
					"file", "path", json_text(u->wpath, strlen(u->wpath))));
	return 0;
}

static int upload_open(struct upload *u, const char *abs)
{
	free(u->wpath);
	u->wpath = strdup(abs);
	if (!u->wpath) {
		snprintf(u->problem, sizeof(u->problem), "out of memory");
		return -1;
	}
	u->w = sandlot_file_open_write(u->sb, abs, 0644, SANDLOT_WRITE_MKDIRS, &u->err);
	return u->w ? 0 : -1;
}

static int upload_part(void *ud, const char *field, const char *filename, const char *data,
		       size_t len, uint64_t off)
{
	struct upload *u = ud;
	/* A new part starts at offset 0, but libmicrohttpd may also hand a
	 * part's start over as an empty piece at 0 before its data (at 0
	 * again): the same part while nothing of it has come and its name is
	 * the same. */
	int same = u->parts > 0 && off == 0 && u->part_end == 0 && u->part_name && filename &&
		   strcmp(u->part_name, filename) == 0;
	u->part_end = off + len;
	if (off == 0 && !same) {
		free(u->part_name);
		u->part_name = filename ? strdup(filename) : NULL;
		if (upload_commit(u) < 0)
			return -1;
		if (!filename) {
			/* a plain form field: not a file (E2B sends only files) */
			snprintf(u->problem, sizeof(u->problem),
				 "form field \"%.64s\" is not a file", field);
			return -1;
		}
		if (++u->parts > 1 && u->path) {
			snprintf(u->problem, sizeof(u->problem),
				 "?path= names one file, and the form has several: name "
				 "each by its filename instead");
			return -1;
		}
		const char *name = u->path ? u->path : filename;
		if (!*name) {
			snprintf(u->problem, sizeof(u->problem),
				 "a file of the form has no path (filename)");
			return -1;
		}
		cleanup_free char *abs = e2b_abs_path(name);
		if (!abs || upload_open(u, abs) < 0)
			return -1;
	}
	if (!u->w)
		return 0;
	if (len > 0 && sandlot_file_writer_write(u->w, data, len, &u->err) < 0)
		return -1;
	return 0;
}

static int upload_fail(struct http_req *req)
{
	struct upload *u = req->state;
	if (u->err) {
		sandlot_error_t *err = u->err;
		u->err = NULL;
		int status = sandlot_error_status(err);
		const char *what = u->wpath;
		if (status == ENOSPC || status == EDQUOT) {
			sandlot_error_free(err);
			upload_free(req);
			return http_json(req, 507, json_pack("{s:i, s:s}", "code", 507, "message",
							     "not enough disk space available"));
		}
		char *w = what ? strdup(what) : NULL;
		upload_free(req);
		e2b_answer_sandlot(req, E2B_PLAIN, err, w);
		free(w);
		return -1;
	}
	char problem[256];
	snprintf(problem, sizeof(problem), "%s",
		 u->problem[0] ? u->problem : "the form is malformed or was cut short");
	upload_free(req);
	e2b_answer_error(req, E2B_PLAIN, "invalid_argument", "%s", problem);
	return -1;
}

static int upload_begin(struct http_req *req)
{
	char *abs = NULL;
	if (files_path(req, &abs) < 0)
		return -1;
	if (check_user(req, E2B_PLAIN, http_query(req, "username")) < 0) {
		free(abs);
		return -1;
	}
	const char *enc = http_header(req, "Content-Encoding");
	if (enc && strcasecmp(enc, "identity") != 0) {
		free(abs);
		e2b_answer_error(req, E2B_PLAIN, "invalid_argument",
				 "Content-Encoding %.32s is not supported: upload uncompressed", enc);
		return -1;
	}
	struct upload *u = calloc(1, sizeof(*u));
	if (!u || !(u->written = json_array())) {
		free(u);
		free(abs);
		http_error(req, 500, "internal", "out of memory");
		return -1;
	}
	u->path = abs;
	req->state = u;
	const char *ct = http_header(req, "Content-Type");
	int multipart = ct && strncasecmp(ct, "multipart/form-data", 19) == 0;
	if (!multipart && !u->path) {
		upload_free(req);
		e2b_answer_error(req, E2B_PLAIN, "invalid_argument",
				 "the path of the file is required (?path=)");
		return -1;
	}
	u->s = e2b_sandbox(req, E2B_PLAIN, E2B_ENVD_PORT, &u->sb);
	if (!u->s) {
		upload_free(req);
		return -1;
	}
	if (multipart) {
		u->form = http_form_new(req, upload_part, u);
		if (!u->form) {
			upload_free(req);
			e2b_answer_error(req, E2B_PLAIN, "invalid_argument",
					 "the multipart/form-data body has no boundary");
			return -1;
		}
		return 0;
	}
	if (upload_open(u, u->path) < 0)
		return upload_fail(req);
	return 0;
}

static int upload_chunk(struct http_req *req, const char *data, size_t len)
{
	struct upload *u = req->state;
	__atomic_add_fetch(&req->d->m.bytes_uploaded, (uint64_t)len, __ATOMIC_RELAXED);
	if (u->form) {
		if (http_form_feed(u->form, data, len) < 0)
			return upload_fail(req);
		return 0;
	}
	if (sandlot_file_writer_write(u->w, data, len, &u->err) < 0)
		return upload_fail(req);
	return 0;
}

static int upload_end(struct http_req *req)
{
	struct upload *u = req->state;
	if (!u)
		return req->answered ? 0 : http_error(req, 500, "internal", "upload state lost");
	if (u->form) {
		int rc = http_form_free(u->form);
		u->form = NULL;
		if (rc < 0) {
			upload_fail(req);
			return 0;
		}
		if (u->parts == 0 && !u->w) {
			upload_free(req);
			return e2b_answer_error(req, E2B_PLAIN, "invalid_argument",
						"the form holds no file");
		}
	}
	if (upload_commit(u) < 0) {
		upload_fail(req);
		return 0;
	}
	e2b_scan_changes(req->d, u->s);
	json_t *written = json_incref(u->written);
	upload_free(req);
	return http_json(req, 200, written);
}

static int upload_abort(struct http_req *req)
{
	upload_free(req);
	return 0;
}

/* ---- /health ------------------------------------------------------------------- */

static int health(struct http_req *req)
{
	sandlot_t *sb;
	struct dsb *s = e2b_sandbox(req, E2B_PLAIN, E2B_ENVD_PORT, &sb);
	if (!s)
		return 0;
	dsb_put(req->d, s);
	return http_empty(req, 204);
}

const struct http_route e2b_envd_routes[] = {
	{ "GET", "/e2b/health", HTTP_NOBODY, health, NULL, NULL, NULL },
	{ "GET", "/e2b/files", HTTP_NOBODY, files_get, NULL, NULL, NULL },
	{ "POST", "/e2b/files", HTTP_RAW, upload_begin, upload_chunk, upload_end, upload_abort },
	{ "POST", "/e2b/filesystem.Filesystem/{}", HTTP_RAW, connect_begin, connect_chunk,
	  filesystem_end, connect_abort },
	{ "POST", "/e2b/process.Process/{}", HTTP_RAW, connect_begin, connect_chunk, process_end,
	  connect_abort },
	{ 0 },
};
