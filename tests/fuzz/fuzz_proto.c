/* Fuzz entry point for the protocol codec (src/common/proto.c).
 *
 * The input is treated as bytes arriving on the connection.  They go
 * through an sl_reader twice — once via sl_reader_space/commit in chunks
 * (the path the real readers take), once via sl_reader_feed — and every
 * record of every frame is decoded with every typed accessor.  Besides the
 * sanitizers, a few oracles abort on a wrong answer:
 *   - both reader paths yield the same frames, and the same final verdict;
 *   - each frame re-encoded with sl_msg equals the bytes it was read from;
 *   - the records that decode re-encode to the same payload bytes;
 *   - an accessor that succeeds was given exactly the right length;
 *   - the reader never holds more than one maximal frame.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FRAME_MAX ((size_t)SANDLOT_PROTO_HEADER + SANDLOT_PROTO_MAX_PAYLOAD)

static void check(int ok)
{
	if (!ok)
		abort();
}

static void decode_records(const uint8_t *payload, size_t len)
{
	struct sl_rec_iter it;
	struct sl_rec r;
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_OK, 0, 0);
	sl_rec_iter_init(&it, payload, len);
	size_t used = 0;
	int rc;
	while ((rc = sl_rec_next(&it, &r)) == 1) {
		check(r.val >= payload && r.val + r.len <= payload + len);
		uint8_t u8;
		uint32_t u32;
		int32_t i32;
		uint64_t u64;
		int64_t i64;
		check((sl_rec_u8(&r, &u8) == 0) == (r.len == 1));
		check((sl_rec_u32(&r, &u32) == 0) == (r.len == 4));
		check((sl_rec_i32(&r, &i32) == 0) == (r.len == 4));
		check((sl_rec_u64(&r, &u64) == 0) == (r.len == 8));
		check((sl_rec_i64(&r, &i64) == 0) == (r.len == 8));
		if (r.len == 4)
			check((uint32_t)i32 == u32);
		if (r.len == 8)
			check((uint64_t)i64 == u64);
		errno = 0;
		char *s = sl_rec_str(&r);
		if (s) {
			check(strlen(s) == r.len && memcmp(s, r.val, r.len) == 0);
			free(s);
		} else {
			check(errno == EPROTO && memchr(r.val, 0, r.len) != NULL);
		}
		sl_msg_put_bytes(&m, r.tag, r.val, r.len);
		used += 6 + (size_t)r.len;
	}
	check(rc == 0 ? used == len : used < len);
	check(sl_msg_finish(&m) == 0);
	check(m.len - SANDLOT_PROTO_HEADER == used &&
	      memcmp(m.buf + SANDLOT_PROTO_HEADER, payload, used) == 0);
	sl_msg_free(&m);
}

/* Check one frame popped at stream offset *pos against the input. */
static void on_frame(const uint8_t *data, size_t size, size_t *pos,
		     const struct sl_frame_header *h, const uint8_t *payload)
{
	check(*pos + SANDLOT_PROTO_HEADER + h->length <= size);
	check(h->length <= SANDLOT_PROTO_MAX_PAYLOAD && sl_msg_known(h->type));
	struct sl_msg m;
	sl_msg_begin(&m, h->type, h->flags, h->stream);
	sl_msg_put_raw(&m, payload, h->length);
	check(sl_msg_finish(&m) == 0);
	check(m.len == SANDLOT_PROTO_HEADER + h->length && memcmp(m.buf, data + *pos, m.len) == 0);
	sl_msg_free(&m);
	decode_records(payload, h->length);
	*pos += SANDLOT_PROTO_HEADER + h->length;
}

/* Pop every complete frame.  Returns -1 once the reader is broken. */
static int drain(struct sl_reader *r, const uint8_t *data, size_t size, size_t *pos, size_t *n)
{
	struct sl_frame_header h;
	const uint8_t *payload;
	int rc;
	while ((rc = sl_reader_next(r, &h, &payload)) == 1) {
		on_frame(data, size, pos, &h, payload);
		(*n)++;
	}
	check(r->cap <= FRAME_MAX);
	if (rc < 0) {
		check(errno == EPROTO && r->broken);
		return -1;
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sl_frame_header h;
	if (size >= SANDLOT_PROTO_HEADER && sl_header_decode(data, &h) == 0)
		check(h.length <= SANDLOT_PROTO_MAX_PAYLOAD);
	decode_records(data, size);

	/* Path 1: space/commit with chunk sizes drawn from the input. */
	struct sl_reader r;
	sl_reader_init(&r);
	size_t off = 0, pos1 = 0, n1 = 0;
	int broken1 = 0;
	uint32_t seed = (uint32_t)size * 2654435761u;
	while (off < size && !broken1) {
		size_t avail;
		uint8_t *sp = sl_reader_space(&r, &avail);
		check(sp != NULL && avail > 0);
		seed = seed * 1103515245u + 12345u + data[off];
		size_t n = 1 + (seed >> 16) % 97;
		if (n > avail)
			n = avail;
		if (n > size - off)
			n = size - off;
		memcpy(sp, data + off, n);
		sl_reader_commit(&r, n);
		off += n;
		broken1 = drain(&r, data, size, &pos1, &n1) < 0;
	}
	sl_reader_free(&r);

	/* Path 2: feed in bigger chunks; ENOBUFS only when it cannot fit. */
	sl_reader_init(&r);
	size_t pos2 = 0, n2 = 0;
	int broken2 = 0;
	off = 0;
	while (off < size && !broken2) {
		size_t n = size - off < 4093 ? size - off : 4093;
		if (sl_reader_feed(&r, data + off, n) < 0) {
			check(errno == ENOBUFS && r.len + n > FRAME_MAX);
			n = FRAME_MAX - r.len;
			check(sl_reader_feed(&r, data + off, n) == 0);
		}
		off += n;
		broken2 = drain(&r, data, size, &pos2, &n2) < 0;
	}
	sl_reader_free(&r);

	check(n1 == n2 && pos1 == pos2 && broken1 == broken2);
	return 0;
}
