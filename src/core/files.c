/* File operations and change tracking, performed by init inside the
 * sandbox (spec/protocol.md, "Files" and "Change tracking"). */
#include "internal.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "core/sized.h"

#define CREDIT_BATCH (64u * 1024)

/* A request stream: one request, zero or more item frames, then OK/ERROR. */
struct req {
	struct sl_stream s;
	sandlot_t *sb;
	int done;
	sandlot_error_t *error;
	char what[160];
	uint8_t *ok;
	uint32_t ok_len;
	/* Item frames (DATA, ENTRIES, CHANGES); called with conn->lock held. */
	void (*on_item)(struct req *r, const struct sl_frame_header *h, const uint8_t *payload);
	void *ctx;
};

static void req_on_frame(struct sl_stream *s, const struct sl_frame_header *h, const uint8_t *payload)
{
	struct req *r = (struct req *)s;
	if (h->type == SL_MSG_OK || h->type == SL_MSG_ERROR) {
		if (h->type == SL_MSG_OK) {
			r->ok = malloc(h->length ? h->length : 1);
			if (r->ok) {
				memcpy(r->ok, payload, h->length);
				r->ok_len = h->length;
			} else {
				sandlot__error(&r->error, ENOMEM, "%s: out of memory", r->what);
			}
		} else if (!r->error) {
			sandlot__error_from_frame(&r->error, payload, h->length, r->what);
		}
		sandlot__stream_unregister_locked(s);
		r->done = 1;
		pthread_cond_broadcast(&s->conn->cond);
		return;
	}
	if (r->on_item)
		r->on_item(r, h, payload);
}

static void req_on_lost(struct sl_stream *s)
{
	struct req *r = (struct req *)s;
	if (!r->error)
		sandlot__error(&r->error, EPIPE, "%s: the sandbox is gone", r->what);
	r->done = 1;
	pthread_cond_broadcast(&s->conn->cond);
}

static int req_start(sandlot_t *sb, struct req *r, uint8_t type, const char *path,
		     struct sl_msg *m, sandlot_error_t **err)
{
	if (sandlot__stream_register(&sb->conn, &r->s, req_on_frame, req_on_lost) < 0)
		return sandlot__error(err, EPIPE, "%s: the sandbox is gone", r->what);
	/* Held until req_cleanup(): the sandbox outlives this request even if
	 * another thread destroys it meanwhile. */
	r->sb = sb;
	sandlot__ref(sb);
	sl_msg_begin(m, type, 0, r->s.id);
	if (path)
		sl_msg_put_str(m, SL_TAG_PATH, path);
	return 0;
}

/* Send the request built in m; on failure the stream is dropped. */
static int req_send(struct req *r, struct sl_msg *m, sandlot_error_t **err)
{
	if (sandlot__conn_send(&r->sb->conn, m, err) < 0) {
		pthread_mutex_lock(&r->sb->conn.lock);
		sandlot__stream_unregister_locked(&r->s);
		pthread_mutex_unlock(&r->sb->conn.lock);
		sandlot__unref(r->sb);
		r->sb = NULL;
		return -1;
	}
	return 0;
}

/* Wait for the end of the request; returns 0 or -1 with its error. */
static int req_wait(struct req *r, sandlot_error_t **err)
{
	struct sl_conn *c = &r->sb->conn;
	pthread_mutex_lock(&c->lock);
	while (!r->done)
		pthread_cond_wait(&c->cond, &c->lock);
	pthread_mutex_unlock(&c->lock);
	if (r->error) {
		if (err) {
			sandlot_error_free(*err);
			*err = r->error;
		} else {
			sandlot_error_free(r->error);
		}
		r->error = NULL;
		return -1;
	}
	return 0;
}

static void req_cleanup(struct req *r)
{
	free(r->ok);
	r->ok = NULL;
	sandlot_error_free(r->error);
	r->error = NULL;
	if (r->sb)
		sandlot__unref(r->sb);
	r->sb = NULL;
}

static int check_path(const char *path, const char *op, sandlot_error_t **err)
{
	if (!path || !*path)
		return sandlot__error(err, EINVAL, "%s: empty path", op);
	if (strlen(path) > 4096)
		return sandlot__error(err, ENAMETOOLONG, "%s: path longer than 4096 bytes", op);
	return 0;
}

/* ---- write ------------------------------------------------------------- */

struct sandlot_file_writer {
	struct req r;
	char path[4097];
};

sandlot_file_writer_t *sandlot_file_open_write(sandlot_t *sb, const char *path, uint32_t mode,
					       unsigned flags, sandlot_error_t **err)
{
	if (check_path(path, "write", err) < 0)
		return NULL;
	sandlot_file_writer_t *w = calloc(1, sizeof(*w));
	if (!w)
		return sandlot__error(err, ENOMEM, "out of memory"), NULL;
	snprintf(w->path, sizeof(w->path), "%s", path);
	snprintf(w->r.what, sizeof(w->r.what), "write %.140s", path);
	struct sl_msg m;
	if (req_start(sb, &w->r, SL_MSG_FWRITE, path, &m, err) < 0) {
		free(w);
		return NULL;
	}
	sl_msg_put_u32(&m, SL_TAG_MODE, mode ? mode : 0644);
	sl_msg_put_u32(&m, SL_TAG_FLAGS, flags & SANDLOT_WRITE_MKDIRS ? 1 : 0);
	if (req_send(&w->r, &m, err) < 0) {
		free(w);
		return NULL;
	}
	return w;
}

static int writer_done(sandlot_file_writer_t *w)
{
	pthread_mutex_lock(&w->r.sb->conn.lock);
	int done = w->r.done;
	pthread_mutex_unlock(&w->r.sb->conn.lock);
	return done;
}

int sandlot_file_writer_write(sandlot_file_writer_t *w, const void *data, size_t len,
			      sandlot_error_t **err)
{
	const uint8_t *p = data;
	while (len > 0) {
		/* Init gave up early (ENOSPC, a missing parent...): say why now
		 * rather than after the caller sent everything. */
		if (writer_done(w))
			return req_wait(&w->r, err) < 0 ? -1
				: sandlot__error(err, EPROTO, "%s: the sandbox ended the transfer early",
						 w->r.what);
		size_t n = len < SANDLOT_PROTO_MAX_DATA ? len : SANDLOT_PROTO_MAX_DATA;
		struct sl_msg m;
		sl_msg_begin(&m, SL_MSG_DATA, 0, w->r.s.id);
		sl_msg_put_raw(&m, p, n);
		if (sandlot__conn_send(&w->r.sb->conn, &m, NULL) < 0)
			return req_wait(&w->r, err);
		p += n;
		len -= n;
	}
	return 0;
}

int sandlot_file_writer_commit(sandlot_file_writer_t *w, sandlot_error_t **err)
{
	if (!writer_done(w)) {
		struct sl_msg m;
		sl_msg_begin(&m, SL_MSG_DATA, SANDLOT_PROTO_FLAG_END, w->r.s.id);
		sandlot__conn_send(&w->r.sb->conn, &m, NULL); /* a dead sandbox shows in req_wait */
	}
	int rc = req_wait(&w->r, err);
	if (rc == 0 && !w->r.ok)
		rc = sandlot__error(err, EPROTO, "%s: the sandbox ended the transfer early", w->r.what);
	req_cleanup(&w->r);
	free(w);
	return rc;
}

void sandlot_file_writer_abort(sandlot_file_writer_t *w)
{
	if (!w)
		return;
	/* Init removes its temporary file and answers ECANCELED. */
	if (!writer_done(w))
		sandlot__conn_send_u32(&w->r.sb->conn, SL_MSG_KILL, w->r.s.id, SL_TAG_SIGNAL, SIGKILL, NULL);
	req_wait(&w->r, NULL);
	req_cleanup(&w->r);
	free(w);
}

int sandlot_file_write(sandlot_t *sb, const char *path, uint32_t mode, unsigned flags,
		       sandlot_read_fn src, void *userdata, sandlot_error_t **err)
{
	sandlot_file_writer_t *w = sandlot_file_open_write(sb, path, mode, flags, err);
	if (!w)
		return -1;
	uint8_t *buf = malloc(SANDLOT_PROTO_MAX_DATA);
	if (!buf) {
		sandlot_file_writer_abort(w);
		return sandlot__error(err, ENOMEM, "write %s: out of memory", path);
	}
	for (;;) {
		ssize_t n = src(userdata, buf, SANDLOT_PROTO_MAX_DATA);
		if (n < 0) {
			int e = errno ? errno : EIO;
			free(buf);
			sandlot_file_writer_abort(w);
			return sandlot__error_errno(err, e, "write %s: reading the source failed", path);
		}
		if (n == 0)
			break;
		if (sandlot_file_writer_write(w, buf, (size_t)n, err) < 0) {
			free(buf);
			sandlot_file_writer_abort(w);
			return -1;
		}
	}
	free(buf);
	return sandlot_file_writer_commit(w, err);
}

static ssize_t fd_source(void *ud, void *buf, size_t len)
{
	int fd = *(int *)ud;
	for (;;) {
		ssize_t n = read(fd, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		return n;
	}
}

int sandlot_file_write_fd(sandlot_t *sb, const char *path, uint32_t mode, unsigned flags, int fd,
			  sandlot_error_t **err)
{
	return sandlot_file_write(sb, path, mode, flags, fd_source, &fd, err);
}

/* ---- read -------------------------------------------------------------- */

/* Data frames are queued as they arrive; the window (credit) bounds the
 * queue, and credit goes back to init only as the caller consumes. */
struct chunk {
	struct chunk *next;
	size_t len, off;
	uint8_t data[];
};

struct sandlot_file_reader {
	struct req r;
	struct chunk *head, *tail;
	int eof;           /* the END frame arrived */
	int started;       /* a first DATA (or the end) arrived */
	int oom;
	int refused;       /* init broke the limit or its credit: refused_* say how */
	int refused_status;
	char refused_msg[200];
	uint32_t consumed; /* read by the caller, not yet credited */
	uint64_t received; /* data bytes that arrived */
	uint64_t allowed;  /* credit given to init so far (the window, then grants) */
	uint64_t max;      /* MAX_BYTES, 0 = none */
};

/* A compromised init could send more than it was allowed to: more than
 * the limit, or past its credit (which is what bounds the queue).  The
 * transfer then fails; what came too much is not kept.  conn->lock held. */
static int reader_accept(sandlot_file_reader_t *rd, uint32_t len)
{
	if (rd->refused)
		return 0;
	if (rd->max && rd->received + len > rd->max) {
		rd->refused_status = EFBIG;
		snprintf(rd->refused_msg, sizeof(rd->refused_msg),
			 "the sandbox sent more than the limit of %llu bytes",
			 (unsigned long long)rd->max);
	} else if (rd->received + len > rd->allowed) {
		rd->refused_status = EPROTO;
		snprintf(rd->refused_msg, sizeof(rd->refused_msg),
			 "the sandbox sent more data than its credit allowed");
	} else {
		rd->received += len;
		return 1;
	}
	rd->refused = 1;
	return 0;
}

static void reader_item(struct req *r, const struct sl_frame_header *h, const uint8_t *payload)
{
	sandlot_file_reader_t *rd = (sandlot_file_reader_t *)r;
	if (h->type != SL_MSG_DATA)
		return;
	rd->started = 1;
	if (h->length && !reader_accept(rd, h->length)) {
		pthread_cond_broadcast(&r->s.conn->cond);
		return;
	}
	if (h->length) {
		struct chunk *c = malloc(sizeof(*c) + h->length);
		if (!c) {
			rd->oom = 1;
		} else {
			c->next = NULL;
			c->len = h->length;
			c->off = 0;
			memcpy(c->data, payload, h->length);
			if (rd->tail)
				rd->tail->next = c;
			else
				rd->head = c;
			rd->tail = c;
		}
	}
	if (h->flags & SANDLOT_PROTO_FLAG_END)
		rd->eof = 1;
	pthread_cond_broadcast(&r->s.conn->cond);
}

sandlot_file_reader_t *sandlot_file_open_read_max(sandlot_t *sb, const char *path,
						  uint64_t max_bytes, sandlot_error_t **err)
{
	if (check_path(path, "read", err) < 0)
		return NULL;
	sandlot_file_reader_t *rd = calloc(1, sizeof(*rd));
	if (!rd)
		return sandlot__error(err, ENOMEM, "out of memory"), NULL;
	rd->r.on_item = reader_item;
	rd->max = max_bytes;
	rd->allowed = SANDLOT_PROTO_WINDOW;
	snprintf(rd->r.what, sizeof(rd->r.what), "read %.140s", path);
	struct sl_msg m;
	if (req_start(sb, &rd->r, SL_MSG_FREAD, path, &m, err) < 0) {
		free(rd);
		return NULL;
	}
	if (max_bytes)
		sl_msg_put_u64(&m, SL_TAG_MAX_BYTES, max_bytes);
	if (req_send(&rd->r, &m, err) < 0) {
		free(rd);
		return NULL;
	}
	/* Init answers ERROR (missing, not a regular file, over the limit) or
	 * starts the data. */
	struct sl_conn *c = &sb->conn;
	pthread_mutex_lock(&c->lock);
	while (!rd->started && !rd->r.done)
		pthread_cond_wait(&c->cond, &c->lock);
	int failed = rd->r.done && rd->r.error;
	pthread_mutex_unlock(&c->lock);
	if (failed) {
		req_wait(&rd->r, err);
		sandlot_file_reader_close(rd);
		return NULL;
	}
	return rd;
}

sandlot_file_reader_t *sandlot_file_open_read(sandlot_t *sb, const char *path, sandlot_error_t **err)
{
	return sandlot_file_open_read_max(sb, path, 0, err);
}

ssize_t sandlot_file_reader_read(sandlot_file_reader_t *rd, void *buf, size_t len,
				 sandlot_error_t **err)
{
	struct sl_conn *c = &rd->r.sb->conn;
	pthread_mutex_lock(&c->lock);
	while (!rd->head && !rd->eof && !rd->r.done && !rd->refused)
		pthread_cond_wait(&c->cond, &c->lock);
	if (rd->refused) {
		/* Too much came: fail now, whatever is queued. */
		pthread_mutex_unlock(&c->lock);
		return sandlot__error(err, rd->refused_status, "%s: %s", rd->r.what, rd->refused_msg);
	}
	size_t n = 0;
	while (rd->head && n < len) {
		struct chunk *ch = rd->head;
		size_t k = ch->len - ch->off;
		if (k > len - n)
			k = len - n;
		memcpy((uint8_t *)buf + n, ch->data + ch->off, k);
		ch->off += k;
		n += k;
		if (ch->off == ch->len) {
			rd->head = ch->next;
			if (!rd->head)
				rd->tail = NULL;
			free(ch);
		}
	}
	rd->consumed += (uint32_t)n;
	uint32_t grant = 0;
	if (rd->consumed >= CREDIT_BATCH && !rd->eof) {
		grant = rd->consumed;
		rd->consumed = 0;
		rd->allowed += grant;
	}
	int oom = rd->oom, eof = rd->eof, done = rd->r.done;
	sandlot_error_t *e = rd->r.error;
	pthread_mutex_unlock(&c->lock);
	if (grant)
		sandlot__conn_send_u32(c, SL_MSG_CREDIT, rd->r.s.id, SL_TAG_CREDIT, grant, NULL);
	if (n > 0)
		return (ssize_t)n;
	if (oom)
		return sandlot__error(err, ENOMEM, "%s: out of memory", rd->r.what);
	if (eof) {
		/* The OK after the last DATA confirms the whole file was sent. */
		if (req_wait(&rd->r, err) < 0)
			return -1;
		return 0;
	}
	if (done && e)
		return req_wait(&rd->r, err);
	return sandlot__error(err, EPROTO, "%s: the sandbox ended the transfer early", rd->r.what);
}

void sandlot_file_reader_close(sandlot_file_reader_t *rd)
{
	if (!rd)
		return;
	struct sl_conn *c = &rd->r.sb->conn;
	pthread_mutex_lock(&c->lock);
	int done = rd->r.done;
	pthread_mutex_unlock(&c->lock);
	if (!done) {
		sandlot__conn_send_u32(c, SL_MSG_KILL, rd->r.s.id, SL_TAG_SIGNAL, SIGKILL, NULL);
		req_wait(&rd->r, NULL);
	}
	while (rd->head) {
		struct chunk *ch = rd->head;
		rd->head = ch->next;
		free(ch);
	}
	req_cleanup(&rd->r);
	free(rd);
}

static int file_read(sandlot_t *sb, const char *path, uint64_t max_bytes, sandlot_write_fn sink,
		     void *userdata, sandlot_error_t **err)
{
	sandlot_file_reader_t *rd = sandlot_file_open_read_max(sb, path, max_bytes, err);
	if (!rd)
		return -1;
	uint8_t *buf = malloc(SANDLOT_PROTO_MAX_DATA);
	if (!buf) {
		sandlot_file_reader_close(rd);
		return sandlot__error(err, ENOMEM, "read %s: out of memory", path);
	}
	int rc = 0;
	for (;;) {
		ssize_t n = sandlot_file_reader_read(rd, buf, SANDLOT_PROTO_MAX_DATA, err);
		if (n < 0) {
			rc = -1;
			break;
		}
		if (n == 0)
			break;
		if (sink(userdata, buf, (size_t)n) < 0) {
			rc = sandlot__error_errno(err, errno ? errno : EIO, "read %s: writing the data failed",
						  path);
			break;
		}
	}
	free(buf);
	sandlot_file_reader_close(rd);
	return rc;
}

int sandlot_file_read(sandlot_t *sb, const char *path, sandlot_write_fn sink, void *userdata,
		      sandlot_error_t **err)
{
	return file_read(sb, path, 0, sink, userdata, err);
}

static int fd_sink(void *ud, const void *buf, size_t len)
{
	return sandlot__write_all(*(int *)ud, buf, len);
}

int sandlot_file_read_fd(sandlot_t *sb, const char *path, int fd, sandlot_error_t **err)
{
	return file_read(sb, path, 0, fd_sink, &fd, err);
}

int sandlot_file_read_fd_max(sandlot_t *sb, const char *path, int fd, uint64_t max_bytes,
			     sandlot_error_t **err)
{
	return file_read(sb, path, max_bytes, fd_sink, &fd, err);
}

/* ---- stat, list, mkdir, remove ----------------------------------------- */

/* Fill st from the records of one entry; returns the NAME if asked. */
static void parse_stat_rec(const struct sl_rec *rec, sandlot_stat_t *st)
{
	uint8_t t;
	uint32_t mode;
	uint64_t size;
	int64_t mt;
	switch (rec->tag) {
	case SL_TAG_FTYPE:
		if (sl_rec_u8(rec, &t) == 0)
			st->type = (sandlot_file_type_t)t;
		break;
	case SL_TAG_MODE:
		if (sl_rec_u32(rec, &mode) == 0)
			st->mode = mode;
		break;
	case SL_TAG_SIZE:
		if (sl_rec_u64(rec, &size) == 0)
			st->size = size;
		break;
	case SL_TAG_MTIME_NS:
		if (sl_rec_i64(rec, &mt) == 0)
			st->mtime_ns = mt;
		break;
	case SL_TAG_ALLOCATED:
		if (sl_rec_u64(rec, &size) == 0)
			st->allocated = size;
		break;
	default:
		break;
	}
}

/* The size of the first sandlot_stat_t with a growth rule (docs/
 * libsandlot.md): a caller's is never smaller.  Do not change it when the
 * struct grows. */
#define STAT_MIN_SIZE 32
_Static_assert(sizeof(sandlot_stat_t) >= STAT_MIN_SIZE, "sandlot_stat_t only grows");

/* The sandlot_dirent_t of that version: a name, then the stat. */
#define DIRENT_MIN_SIZE (offsetof(sandlot_dirent_t, st) + STAT_MIN_SIZE)

int sandlot_stat_sized(sandlot_t *sb, const char *path, sandlot_stat_t *caller, size_t out_size,
		       sandlot_error_t **err)
{
	if (sandlot__elem_check("sandlot_stat_t", out_size, STAT_MIN_SIZE, sizeof(sandlot_stat_t),
				err) < 0)
		return -1;
	if (check_path(path, "stat", err) < 0)
		return -1;
	sandlot_stat_t full;
	sandlot_stat_t *out = &full;
	struct req r = { 0 };
	snprintf(r.what, sizeof(r.what), "stat %.140s", path);
	struct sl_msg m;
	if (req_start(sb, &r, SL_MSG_STAT, path, &m, err) < 0 || req_send(&r, &m, err) < 0)
		return -1;
	if (req_wait(&r, err) < 0) {
		req_cleanup(&r);
		return -1;
	}
	memset(out, 0, sizeof(*out));
	out->type = SANDLOT_OTHER;
	struct sl_rec_iter it;
	struct sl_rec rec;
	sl_rec_iter_init(&it, r.ok, r.ok_len);
	while (sl_rec_next(&it, &rec) == 1)
		parse_stat_rec(&rec, out);
	req_cleanup(&r);
	sandlot__elem_put(caller, out_size, &full, sizeof(full));
	return 0;
}

struct list_ctx {
	sandlot_dirent_t *items;
	size_t n, cap;
	int oom;
	char bad[200]; /* why the listing was refused; "" if it was not */
};

/* Refuse an entry name from init that the caller could not safely join to
 * the directory's path (SECURITY.md: a compromised init is a threat).  The
 * whole listing fails: a caller must never act on part of a lie. */
static int list_name_ok(struct list_ctx *ctx, const struct sl_rec *rec)
{
	const char *why = sandlot__entry_name_problem(rec->val, rec->len);
	if (!why)
		return 1;
	char shown[80];
	size_t k = 0;
	for (uint32_t i = 0; i < rec->len && k + 5 < sizeof(shown); i++) {
		unsigned char c = rec->val[i];
		if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
			shown[k++] = (char)c;
		else
			k += (size_t)snprintf(shown + k, sizeof(shown) - k, "\\x%02x", c);
	}
	shown[k] = '\0';
	snprintf(ctx->bad, sizeof(ctx->bad), "the sandbox sent an invalid entry name \"%s\" (%s)",
		 shown, why);
	return 0;
}

static void list_item(struct req *r, const struct sl_frame_header *h, const uint8_t *payload)
{
	struct list_ctx *ctx = r->ctx;
	if (h->type != SL_MSG_ENTRIES || ctx->oom || ctx->bad[0])
		return;
	struct sl_rec_iter it;
	struct sl_rec rec;
	sl_rec_iter_init(&it, payload, h->length);
	while (sl_rec_next(&it, &rec) == 1) {
		if (rec.tag == SL_TAG_NAME) {
			if (!list_name_ok(ctx, &rec))
				return;
			if (ctx->n == ctx->cap) {
				size_t cap = ctx->cap ? ctx->cap * 2 : 32;
				sandlot_dirent_t *ni = realloc(ctx->items, cap * sizeof(*ni));
				if (!ni) {
					ctx->oom = 1;
					return;
				}
				ctx->items = ni;
				ctx->cap = cap;
			}
			sandlot_dirent_t *e = &ctx->items[ctx->n];
			memset(e, 0, sizeof(*e));
			e->st.type = SANDLOT_OTHER;
			e->name = sl_rec_str(&rec);
			if (!e->name) {
				ctx->oom = 1;
				return;
			}
			ctx->n++;
		} else if (ctx->n > 0) {
			parse_stat_rec(&rec, &ctx->items[ctx->n - 1].st);
		}
	}
}

void sandlot_dirents_free_sized(sandlot_dirent_t *entries, size_t count, size_t entry_size)
{
	if (!entries)
		return;
	for (size_t i = 0; i < count; i++) {
		char *name;
		memcpy(&name, (char *)entries + i * entry_size, sizeof(name));
		free(name);
	}
	free(entries);
}

/* The library's array of n entries laid out again with the caller's
 * stride (the names move; `v` is freed).  NULL when out of memory. */
static sandlot_dirent_t *restride_dirents(sandlot_dirent_t *v, size_t n, size_t entry_size)
{
	char *o = calloc(n ? n : 1, entry_size);
	if (!o)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		char *e = o + i * entry_size;
		/* The name, then the stat as far as the caller's entry goes; a
		 * longer entry's stat is zero-filled past this library's. */
		memcpy(e, &v[i], offsetof(sandlot_dirent_t, st));
		sandlot__elem_put(e + offsetof(sandlot_dirent_t, st),
				  entry_size - offsetof(sandlot_dirent_t, st), &v[i].st,
				  sizeof(sandlot_stat_t));
	}
	free(v);
	return (sandlot_dirent_t *)(void *)o;
}

int sandlot_list_sized(sandlot_t *sb, const char *path, sandlot_dirent_t **out, size_t *count,
		       size_t entry_size, sandlot_error_t **err)
{
	if (sandlot__elem_check("sandlot_dirent_t", entry_size, DIRENT_MIN_SIZE,
				sizeof(sandlot_dirent_t), err) < 0)
		return -1;
	if (check_path(path, "list", err) < 0)
		return -1;
	struct list_ctx ctx = { 0 };
	struct req r = { 0 };
	r.on_item = list_item;
	r.ctx = &ctx;
	snprintf(r.what, sizeof(r.what), "list %.140s", path);
	struct sl_msg m;
	if (req_start(sb, &r, SL_MSG_LIST, path, &m, err) < 0 || req_send(&r, &m, err) < 0)
		return -1;
	int rc = req_wait(&r, err);
	req_cleanup(&r);
	if (rc == 0 && ctx.bad[0])
		rc = sandlot__error(err, EPROTO, "list %s: %s", path, ctx.bad);
	else if (rc == 0 && ctx.oom)
		rc = sandlot__error(err, ENOMEM, "list %s: out of memory", path);
	if (rc < 0) {
		sandlot_dirents_free(ctx.items, ctx.n);
		return -1;
	}
	if (entry_size != sizeof(sandlot_dirent_t)) {
		sandlot_dirent_t *v = restride_dirents(ctx.items, ctx.n, entry_size);
		if (!v) {
			sandlot_dirents_free(ctx.items, ctx.n);
			return sandlot__error(err, ENOMEM, "list %s: out of memory", path);
		}
		ctx.items = v;
	}
	*out = ctx.items;
	*count = ctx.n;
	return 0;
}

static int simple_request(sandlot_t *sb, uint8_t type, const char *op, const char *path,
			  int with_mode, uint32_t mode, uint32_t flags, sandlot_error_t **err)
{
	if (check_path(path, op, err) < 0)
		return -1;
	struct req r = { 0 };
	snprintf(r.what, sizeof(r.what), "%s %.140s", op, path);
	struct sl_msg m;
	if (req_start(sb, &r, type, path, &m, err) < 0)
		return -1;
	if (with_mode)
		sl_msg_put_u32(&m, SL_TAG_MODE, mode);
	sl_msg_put_u32(&m, SL_TAG_FLAGS, flags);
	if (req_send(&r, &m, err) < 0)
		return -1;
	int rc = req_wait(&r, err);
	req_cleanup(&r);
	return rc;
}

int sandlot_mkdir(sandlot_t *sb, const char *path, uint32_t mode, unsigned flags,
		  sandlot_error_t **err)
{
	return simple_request(sb, SL_MSG_MKDIR, "mkdir", path, 1, mode ? mode : 0755,
			      flags & SANDLOT_MKDIR_PARENTS ? 1 : 0, err);
}

int sandlot_remove(sandlot_t *sb, const char *path, unsigned flags, sandlot_error_t **err)
{
	return simple_request(sb, SL_MSG_REMOVE, "remove", path, 0, 0,
			      flags & SANDLOT_REMOVE_RECURSIVE ? 1 : 0, err);
}

/* ---- changes ----------------------------------------------------------- */

struct scan_ctx {
	sandlot_changes_t *out;
	size_t cap;
	int oom;
	uint64_t max;   /* bytes of report accepted at most */
	int over;       /* init sent more than that: the rest was dropped */
};

/* What a change counts against the report's limit: its path plus its
 * records (spec/protocol.md, "Change tracking"). */
#define CHANGE_RECORDS 34

static void scan_item(struct req *r, const struct sl_frame_header *h, const uint8_t *payload)
{
	struct scan_ctx *ctx = r->ctx;
	sandlot_changes_t *c = ctx->out;
	if (h->type != SL_MSG_CHANGES || ctx->oom || ctx->over)
		return;
	struct sl_rec_iter it;
	struct sl_rec rec;
	sl_rec_iter_init(&it, payload, h->length);
	while (sl_rec_next(&it, &rec) == 1) {
		if (rec.tag == SL_TAG_KIND) {
			uint8_t k;
			if (sl_rec_u8(&rec, &k) < 0)
				continue;
			/* The group's size is known at its PATH; a compromised init
			 * could send more than asked: what passes the limit is not
			 * kept. */
			if (c->count > 0 && !c->items[c->count - 1].path)
				c->count--; /* a group without PATH: dropped */
			if (c->count == ctx->cap) {
				size_t cap = ctx->cap ? ctx->cap * 2 : 32;
				sandlot_change_t *ni = realloc(c->items, cap * sizeof(*ni));
				if (!ni) {
					ctx->oom = 1;
					return;
				}
				c->items = ni;
				ctx->cap = cap;
			}
			sandlot_change_t *e = &c->items[c->count++];
			memset(e, 0, sizeof(*e));
			e->kind = (sandlot_change_kind_t)k;
			e->type = SANDLOT_OTHER;
		} else if (c->count > 0) {
			sandlot_change_t *e = &c->items[c->count - 1];
			uint8_t t;
			if (rec.tag == SL_TAG_PATH && !e->path) {
				uint64_t cost = CHANGE_RECORDS + rec.len;
				if (c->bytes + cost > ctx->max) {
					c->count--;
					ctx->over = 1;
					return;
				}
				e->path = sl_rec_str(&rec);
				if (!e->path) {
					if (errno == ENOMEM)
						ctx->oom = 1;
					continue; /* a NUL in it: the group is dropped */
				}
				c->bytes += cost;
			} else if (rec.tag == SL_TAG_FTYPE && sl_rec_u8(&rec, &t) == 0) {
				e->type = (sandlot_file_type_t)t;
			} else if (rec.tag == SL_TAG_SIZE) {
				sl_rec_u64(&rec, &e->size);
			}
		}
	}
}

void sandlot_changes_free_sized(sandlot_changes_t *c, size_t item_size)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->count; i++) {
		char *path;
		memcpy(&path, (char *)c->items + i * item_size + offsetof(sandlot_change_t, path),
		       sizeof(path));
		free(path);
	}
	free(c->items);
	c->items = NULL;
	c->count = 0;
}

static int changes_scan(sandlot_t *sb, sandlot_changes_t *out, int baseline, uint64_t max_bytes,
			sandlot_error_t **err)
{
	memset(out, 0, sizeof(*out));
	if (!max_bytes)
		max_bytes = sb->opts.changes_max_bytes;
	struct scan_ctx ctx = { .out = out, .max = max_bytes };
	struct req r = { 0 };
	r.on_item = scan_item;
	r.ctx = &ctx;
	snprintf(r.what, sizeof(r.what), "scan workspace");
	struct sl_msg m;
	if (req_start(sb, &r, SL_MSG_SCAN, NULL, &m, err) < 0)
		return -1;
	sl_msg_put_u32(&m, SL_TAG_FLAGS, baseline ? 1 : 0);
	sl_msg_put_u64(&m, SL_TAG_MAX_BYTES, max_bytes);
	sl_msg_put_u64(&m, SL_TAG_MEMORY, sb->opts.scan_memory_bytes);
	if (req_send(&r, &m, err) < 0)
		return -1;
	int rc = req_wait(&r, err);
	if (rc == 0) {
		struct sl_rec_iter it;
		struct sl_rec rec;
		sl_rec_iter_init(&it, r.ok, r.ok_len);
		while (sl_rec_next(&it, &rec) == 1) {
			uint8_t t;
			if (rec.tag == SL_TAG_TRUNCATED && sl_rec_u8(&rec, &t) == 0)
				out->truncated = t != 0;
		}
		if (ctx.over)
			out->truncated = 1;
	}
	req_cleanup(&r);
	/* Drop entries whose path did not arrive (malformed group). */
	size_t k = 0;
	for (size_t i = 0; i < out->count; i++)
		if (out->items[i].path)
			out->items[k++] = out->items[i];
	out->count = k;
	if (rc == 0 && ctx.oom)
		rc = sandlot__error(err, ENOMEM, "scan workspace: out of memory");
	if (rc < 0)
		sandlot_changes_free(out);
	return rc;
}

/* The first sandlot_change_t with a growth rule: kind, path, type, size. */
#define CHANGE_MIN_SIZE 32
_Static_assert(sizeof(sandlot_change_t) >= CHANGE_MIN_SIZE, "sandlot_change_t only grows");

int sandlot_changes_scan_sized(sandlot_t *sb, uint64_t max_bytes, sandlot_changes_t *caller,
			       size_t item_size, sandlot_error_t **err)
{
	if (sandlot__out_check("sandlot_changes_t", caller, sizeof(*caller), err) < 0 ||
	    sandlot__elem_check("sandlot_change_t", item_size, CHANGE_MIN_SIZE,
				sizeof(sandlot_change_t), err) < 0)
		return -1;
	sandlot_changes_t full;
	if (changes_scan(sb, &full, 0, max_bytes, err) < 0)
		return -1;
	if (item_size != sizeof(sandlot_change_t)) {
		char *v = calloc(full.count ? full.count : 1, item_size);
		if (!v) {
			sandlot_changes_free(&full);
			return sandlot__error(err, ENOMEM, "scan workspace: out of memory");
		}
		for (size_t i = 0; i < full.count; i++)
			sandlot__elem_put(v + i * item_size, item_size, &full.items[i],
					  sizeof(sandlot_change_t));
		free(full.items); /* the paths moved */
		full.items = (sandlot_change_t *)(void *)v;
	}
	sandlot__out_put(caller, &full, sizeof(full));
	return 0;
}

int sandlot__changes_baseline(sandlot_t *sb, sandlot_error_t **err)
{
	sandlot_changes_t c;
	int rc = changes_scan(sb, &c, 1, 0, err);
	sandlot_changes_free(&c);
	return rc;
}
