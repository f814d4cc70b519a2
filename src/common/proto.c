/* Codec for the host <-> sandlot-init protocol (spec/protocol.md).
 *
 * Everything here parses bytes that come from the other side of a trust
 * boundary, so every length is checked against what is actually present
 * before it is used, and length arithmetic is done in size_t after checking
 * that the operands are bounded by SANDLOT_PROTO_MAX_PAYLOAD (so it cannot
 * wrap).  libc only: this file is linked into the static sandlot-init.
 */
#include "common/proto.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define REC_HEADER 6 /* tag u16 + len u32 */

/* Largest buffer a reader or a frame under construction ever holds. */
#define FRAME_MAX ((size_t)SANDLOT_PROTO_HEADER + SANDLOT_PROTO_MAX_PAYLOAD)

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static int eproto(void)
{
	errno = EPROTO;
	return -1;
}

int sl_msg_known(uint8_t type)
{
	switch (type) {
	case SL_MSG_HELLO:
	case SL_MSG_ERROR:
	case SL_MSG_OK:
	case SL_MSG_PING:
	case SL_MSG_SHUTDOWN:
	case SL_MSG_CONFIG:
	case SL_MSG_DETACH:
	case SL_MSG_EXEC:
	case SL_MSG_STARTED:
	case SL_MSG_STDOUT:
	case SL_MSG_STDERR:
	case SL_MSG_EXIT:
	case SL_MSG_STDIN:
	case SL_MSG_KILL:
	case SL_MSG_CREDIT:
	case SL_MSG_ATTACH:
	case SL_MSG_FWRITE:
	case SL_MSG_DATA:
	case SL_MSG_FREAD:
	case SL_MSG_STAT:
	case SL_MSG_LIST:
	case SL_MSG_ENTRIES:
	case SL_MSG_MKDIR:
	case SL_MSG_REMOVE:
	case SL_MSG_SCAN:
	case SL_MSG_CHANGES:
		return 1;
	default:
		return 0;
	}
}

int sl_header_decode(const uint8_t *buf, struct sl_frame_header *out)
{
	uint32_t length = get32(buf);
	uint8_t type = buf[4], flags = buf[5];
	if (length > SANDLOT_PROTO_MAX_PAYLOAD || (flags & ~SANDLOT_PROTO_FLAG_END) ||
	    get16(buf + 6) != 0 || !sl_msg_known(type))
		return eproto();
	out->length = length;
	out->type = type;
	out->flags = flags;
	out->stream = get32(buf + 8);
	return 0;
}

void sl_header_encode(uint8_t *buf, uint32_t length, uint8_t type, uint8_t flags,
		      uint32_t stream)
{
	put32(buf, length);
	buf[4] = type;
	buf[5] = flags;
	put16(buf + 6, 0);
	put32(buf + 8, stream);
}

/* --- building frames ---------------------------------------------------- */

/* `failed` holds the errno value that sl_msg_finish() will report. */
static void msg_fail(struct sl_msg *m, int err)
{
	if (!m->failed)
		m->failed = err;
}

/* Make room for n more bytes and return where they go, or NULL (m->failed
 * set) when that would exceed one maximal frame or memory runs out. */
static uint8_t *msg_reserve(struct sl_msg *m, size_t n)
{
	if (m->failed)
		return NULL;
	if (n > FRAME_MAX - m->len) { /* m->len <= FRAME_MAX always holds */
		msg_fail(m, EMSGSIZE);
		return NULL;
	}
	if (m->len + n > m->cap) {
		size_t cap = m->cap ? m->cap : 256;
		while (cap < m->len + n)
			cap *= 2;
		if (cap > FRAME_MAX)
			cap = FRAME_MAX;
		uint8_t *b = realloc(m->buf, cap);
		if (!b) {
			msg_fail(m, ENOMEM);
			return NULL;
		}
		m->buf = b;
		m->cap = cap;
	}
	uint8_t *p = m->buf + m->len;
	m->len += n;
	return p;
}

void sl_msg_begin(struct sl_msg *m, uint8_t type, uint8_t flags, uint32_t stream)
{
	m->buf = NULL;
	m->len = m->cap = 0;
	m->failed = 0;
	uint8_t *h = msg_reserve(m, SANDLOT_PROTO_HEADER);
	if (h)
		sl_header_encode(h, 0, type, flags, stream);
}

/* Append a record header and return where its n value bytes go. */
static uint8_t *rec_reserve(struct sl_msg *m, uint16_t tag, size_t n)
{
	if (n > SANDLOT_PROTO_MAX_PAYLOAD) {
		msg_fail(m, EMSGSIZE);
		return NULL;
	}
	uint8_t *p = msg_reserve(m, REC_HEADER + n);
	if (!p)
		return NULL;
	put16(p, tag);
	put32(p + 2, (uint32_t)n);
	return p + REC_HEADER;
}

void sl_msg_put_u8(struct sl_msg *m, uint16_t tag, uint8_t v)
{
	uint8_t *p = rec_reserve(m, tag, 1);
	if (p)
		*p = v;
}

void sl_msg_put_u32(struct sl_msg *m, uint16_t tag, uint32_t v)
{
	uint8_t *p = rec_reserve(m, tag, 4);
	if (p)
		put32(p, v);
}

void sl_msg_put_i32(struct sl_msg *m, uint16_t tag, int32_t v)
{
	sl_msg_put_u32(m, tag, (uint32_t)v);
}

void sl_msg_put_u64(struct sl_msg *m, uint16_t tag, uint64_t v)
{
	uint8_t *p = rec_reserve(m, tag, 8);
	if (p)
		put64(p, v);
}

void sl_msg_put_i64(struct sl_msg *m, uint16_t tag, int64_t v)
{
	sl_msg_put_u64(m, tag, (uint64_t)v);
}

void sl_msg_put_str(struct sl_msg *m, uint16_t tag, const char *s)
{
	sl_msg_put_bytes(m, tag, s, strlen(s));
}

void sl_msg_put_bytes(struct sl_msg *m, uint16_t tag, const void *p, size_t n)
{
	uint8_t *d = rec_reserve(m, tag, n);
	if (d && n)
		memcpy(d, p, n);
}

void sl_msg_put_raw(struct sl_msg *m, const void *p, size_t n)
{
	uint8_t *d = msg_reserve(m, n);
	if (d && n)
		memcpy(d, p, n);
}

/* On failure the buffer is released here, so both "finish, then free" and
 * "finish, free only on success" leave nothing behind. */
int sl_msg_finish(struct sl_msg *m)
{
	if (m->failed) {
		int err = m->failed;
		sl_msg_free(m);
		m->failed = err;
		errno = err;
		return -1;
	}
	put32(m->buf, (uint32_t)(m->len - SANDLOT_PROTO_HEADER));
	return 0;
}

void sl_msg_free(struct sl_msg *m)
{
	free(m->buf);
	m->buf = NULL;
	m->len = m->cap = 0;
}

/* --- reading records ---------------------------------------------------- */

void sl_rec_iter_init(struct sl_rec_iter *it, const uint8_t *payload, size_t len)
{
	it->p = payload;
	it->left = len;
}

int sl_rec_next(struct sl_rec_iter *it, struct sl_rec *rec)
{
	if (it->left == 0)
		return 0;
	if (it->left < REC_HEADER)
		return eproto();
	uint32_t len = get32(it->p + 2);
	if (len > it->left - REC_HEADER)
		return eproto();
	rec->tag = get16(it->p);
	rec->len = len;
	rec->val = it->p + REC_HEADER;
	it->p += REC_HEADER + (size_t)len;
	it->left -= REC_HEADER + (size_t)len;
	return 1;
}

int sl_rec_u8(const struct sl_rec *r, uint8_t *out)
{
	if (r->len != 1)
		return eproto();
	*out = r->val[0];
	return 0;
}

int sl_rec_u32(const struct sl_rec *r, uint32_t *out)
{
	if (r->len != 4)
		return eproto();
	*out = get32(r->val);
	return 0;
}

int sl_rec_i32(const struct sl_rec *r, int32_t *out)
{
	uint32_t v;
	if (sl_rec_u32(r, &v) < 0)
		return -1;
	*out = (int32_t)v;
	return 0;
}

int sl_rec_u64(const struct sl_rec *r, uint64_t *out)
{
	if (r->len != 8)
		return eproto();
	*out = get64(r->val);
	return 0;
}

int sl_rec_i64(const struct sl_rec *r, int64_t *out)
{
	uint64_t v;
	if (sl_rec_u64(r, &v) < 0)
		return -1;
	*out = (int64_t)v;
	return 0;
}

/* Strings are byte strings without NUL.  UTF-8 is the convention, but it is
 * deliberately not enforced: file names are whatever the filesystem holds,
 * and a name that cannot be listed or removed would be worse than one that
 * is not valid UTF-8. */
char *sl_rec_str(const struct sl_rec *r)
{
	if (r->len && memchr(r->val, '\0', r->len)) {
		errno = EPROTO;
		return NULL;
	}
	char *s = malloc((size_t)r->len + 1);
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	if (r->len)
		memcpy(s, r->val, r->len);
	s[r->len] = '\0';
	return s;
}

/* --- incremental stream reader ------------------------------------------ */

/* The reader's buffer holds, in order: frames already returned by
 * sl_reader_next() (kept until the next call, because the caller still
 * points into the last one), then bytes not yet returned.  The offset of the
 * first unreturned byte is state that struct sl_reader has no field for, so
 * it lives in a hidden word right after the `cap` bytes of the allocation
 * (`buf` itself stays the plain data buffer).  Delivered frames are
 * discarded only when room is needed (sl_reader_space/feed), by one memmove
 * of the rest, so popping k small frames out of one read costs O(k), not
 * O(k * bytes). */
#define READER_CHUNK ((size_t)64 * 1024 + SANDLOT_PROTO_HEADER)

static size_t reader_off(const struct sl_reader *r)
{
	size_t off = 0;
	if (r->buf)
		memcpy(&off, r->buf + r->cap, sizeof(off));
	return off;
}

static void reader_set_off(struct sl_reader *r, size_t off)
{
	if (r->buf)
		memcpy(r->buf + r->cap, &off, sizeof(off));
}

void sl_reader_init(struct sl_reader *r)
{
	r->buf = NULL;
	r->len = r->cap = 0;
	r->broken = 0;
}

void sl_reader_free(struct sl_reader *r)
{
	free(r->buf);
	sl_reader_init(r);
}

/* Drop delivered frames from the front of the buffer. */
static void reader_compact(struct sl_reader *r)
{
	size_t off = reader_off(r);
	if (off == 0)
		return;
	memmove(r->buf, r->buf + off, r->len - off);
	r->len -= off;
	reader_set_off(r, 0);
}

/* Grow the allocation to `cap` data bytes (never beyond one maximal frame). */
static int reader_grow(struct sl_reader *r, size_t cap)
{
	if (cap <= r->cap)
		return 0;
	size_t off = reader_off(r);
	uint8_t *b = realloc(r->buf, cap + sizeof(size_t));
	if (!b) {
		errno = ENOMEM;
		return -1;
	}
	r->buf = b;
	r->cap = cap;
	reader_set_off(r, off);
	return 0;
}

/* Bytes the frame at the front needs in total, as far as is known yet. */
static size_t reader_need(const struct sl_reader *r)
{
	if (r->len < SANDLOT_PROTO_HEADER)
		return SANDLOT_PROTO_HEADER;
	uint32_t length = get32(r->buf);
	if (length > SANDLOT_PROTO_MAX_PAYLOAD) /* sl_reader_next will reject it */
		return SANDLOT_PROTO_HEADER;
	return SANDLOT_PROTO_HEADER + (size_t)length;
}

uint8_t *sl_reader_space(struct sl_reader *r, size_t *avail)
{
	reader_compact(r);
	size_t want = reader_need(r);
	if (want < READER_CHUNK)
		want = READER_CHUNK;
	if (want > FRAME_MAX)
		want = FRAME_MAX;
	if (reader_grow(r, want) < 0)
		return NULL;
	if (r->len == r->cap) {
		/* Only possible with a complete maximal frame buffered: the caller
		 * must pop it first.  Never hand out 0 bytes, which a read() would
		 * turn into a false end of file. */
		errno = ENOBUFS;
		return NULL;
	}
	*avail = r->cap - r->len;
	return r->buf + r->len;
}

void sl_reader_commit(struct sl_reader *r, size_t n)
{
	if (n > r->cap - r->len) /* caller bug; never step past the buffer */
		n = r->cap - r->len;
	r->len += n;
}

/* Copies all n bytes or none: fails with ENOBUFS when they do not fit in one
 * maximal frame's worth of buffer (pop frames with sl_reader_next() and feed
 * the rest). */
int sl_reader_feed(struct sl_reader *r, const void *data, size_t n)
{
	reader_compact(r);
	if (n > FRAME_MAX - r->len) {
		errno = ENOBUFS;
		return -1;
	}
	size_t want = r->len + n;
	if (want < READER_CHUNK)
		want = READER_CHUNK;
	if (want > FRAME_MAX)
		want = FRAME_MAX;
	if (reader_grow(r, want) < 0)
		return -1;
	if (n)
		memcpy(r->buf + r->len, data, n);
	r->len += n;
	return 0;
}

int sl_reader_next(struct sl_reader *r, struct sl_frame_header *h, const uint8_t **payload)
{
	if (r->broken)
		return eproto();
	size_t off = reader_off(r);
	if (off == r->len && off) { /* everything delivered: reset cheaply */
		r->len = 0;
		reader_set_off(r, 0);
		off = 0;
	}
	size_t have = r->len - off;
	if (have < SANDLOT_PROTO_HEADER)
		return 0;
	struct sl_frame_header hdr;
	if (sl_header_decode(r->buf + off, &hdr) < 0) {
		r->broken = 1;
		return eproto();
	}
	if (have - SANDLOT_PROTO_HEADER < hdr.length)
		return 0;
	*h = hdr;
	*payload = r->buf + off + SANDLOT_PROTO_HEADER;
	reader_set_off(r, off + SANDLOT_PROTO_HEADER + hdr.length);
	return 1;
}
