/* Unit tests of the protocol codec (src/common/proto.c): encoding and
 * decoding round trips, and every rule by which a receiver rejects input. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/proto.h"
#include "tap.h"

#define HDR SANDLOT_PROTO_HEADER
#define MAXP SANDLOT_PROTO_MAX_PAYLOAD

static const uint8_t known_types[] = {
	0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16,
	0x17, 0x18, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29,
};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void raw_header(uint8_t *b, uint32_t len, uint8_t type, uint8_t flags, uint16_t rsv,
		       uint32_t stream)
{
	sl_header_encode(b, len, type, flags, stream);
	b[6] = (uint8_t)rsv;
	b[7] = (uint8_t)(rsv >> 8);
}

static void test_header_roundtrip(void)
{
	uint8_t b[HDR];
	struct sl_frame_header h;
	sl_header_encode(b, 1234, SL_MSG_STDOUT, SANDLOT_PROTO_FLAG_END, 0xdeadbeef);
	CHECK_EQ_INT(b[0], 1234 & 0xff);
	CHECK_EQ_INT(b[1], 1234 >> 8);
	CHECK_EQ_INT(b[4], SL_MSG_STDOUT);
	CHECK_EQ_INT(b[8], 0xef);
	CHECK_EQ_INT(b[11], 0xde);
	CHECK_EQ_INT(sl_header_decode(b, &h), 0);
	CHECK_EQ_INT(h.length, 1234);
	CHECK_EQ_INT(h.type, SL_MSG_STDOUT);
	CHECK_EQ_INT(h.flags, SANDLOT_PROTO_FLAG_END);
	CHECK_EQ_INT(h.stream, 0xdeadbeef);

	sl_header_encode(b, MAXP, SL_MSG_DATA, 0, 0);
	CHECK_EQ_INT(sl_header_decode(b, &h), 0);
	CHECK_EQ_INT(h.length, MAXP);
}

static void test_header_types(void)
{
	uint8_t b[HDR];
	struct sl_frame_header h;
	for (int t = 0; t < 256; t++) {
		int known = memchr(known_types, t, sizeof(known_types)) != NULL;
		CHECK_EQ_INT(sl_msg_known((uint8_t)t), known);
		sl_header_encode(b, 0, (uint8_t)t, 0, 1);
		errno = 0;
		int r = sl_header_decode(b, &h);
		CHECK_EQ_INT(r, known ? 0 : -1);
		if (!known)
			CHECK_EQ_INT(errno, EPROTO);
	}
}

static void test_header_rejects(void)
{
	uint8_t b[HDR];
	struct sl_frame_header h;
	raw_header(b, MAXP + 1, SL_MSG_DATA, 0, 0, 1);
	errno = 0;
	CHECK_EQ_INT(sl_header_decode(b, &h), -1);
	CHECK_EQ_INT(errno, EPROTO);
	raw_header(b, UINT32_MAX, SL_MSG_DATA, 0, 0, 1);
	CHECK_EQ_INT(sl_header_decode(b, &h), -1);
	for (int bit = 1; bit < 8; bit++) {
		raw_header(b, 0, SL_MSG_DATA, (uint8_t)(1u << bit), 0, 1);
		errno = 0;
		CHECK_EQ_INT(sl_header_decode(b, &h), -1);
		CHECK_EQ_INT(errno, EPROTO);
	}
	for (int bit = 0; bit < 16; bit++) {
		raw_header(b, 0, SL_MSG_DATA, 0, (uint16_t)(1u << bit), 1);
		CHECK_EQ_INT(sl_header_decode(b, &h), -1);
	}
}

static void test_records_roundtrip(void)
{
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_EXIT, 0, 7);
	sl_msg_put_u8(&m, SL_TAG_CORE, 1);
	sl_msg_put_u32(&m, SL_TAG_SIGNAL, 0xfffffffe);
	sl_msg_put_i32(&m, SL_TAG_EXIT_CODE, -5);
	sl_msg_put_u64(&m, SL_TAG_SIZE, 0x0123456789abcdefull);
	sl_msg_put_i64(&m, SL_TAG_MTIME_NS, INT64_MIN + 1);
	sl_msg_put_str(&m, SL_TAG_PATH, "dir/\xc3\xa9t\xc3\xa9.txt");
	sl_msg_put_str(&m, SL_TAG_MESSAGE, "");
	sl_msg_put_bytes(&m, 999, "\0\1\2", 3); /* an unknown tag, opaque */
	CHECK_EQ_INT(sl_msg_finish(&m), 0);
	CHECK_EQ_INT(m.len, HDR + 6 * 8 + 1 + 4 + 4 + 8 + 8 + 13 + 0 + 3);

	struct sl_frame_header h;
	CHECK_EQ_INT(sl_header_decode(m.buf, &h), 0);
	CHECK_EQ_INT(h.length, m.len - HDR);
	CHECK_EQ_INT(h.stream, 7);
	struct sl_rec_iter it;
	struct sl_rec r;
	sl_rec_iter_init(&it, m.buf + HDR, h.length);
	uint8_t u8;
	uint32_t u32;
	int32_t i32;
	uint64_t u64;
	int64_t i64;
	CHECK_EQ_INT(sl_rec_next(&it, &r), 1);
	CHECK_EQ_INT(r.tag, SL_TAG_CORE);
	CHECK(sl_rec_u8(&r, &u8) == 0 && u8 == 1);
	CHECK_EQ_INT(sl_rec_next(&it, &r), 1);
	CHECK(sl_rec_u32(&r, &u32) == 0 && u32 == 0xfffffffe);
	CHECK_EQ_INT(sl_rec_next(&it, &r), 1);
	CHECK(sl_rec_i32(&r, &i32) == 0 && i32 == -5);
	CHECK_EQ_INT(sl_rec_next(&it, &r), 1);
	CHECK(sl_rec_u64(&r, &u64) == 0 && u64 == 0x0123456789abcdefull);
	CHECK_EQ_INT(sl_rec_next(&it, &r), 1);
	CHECK(sl_rec_i64(&r, &i64) == 0 && i64 == INT64_MIN + 1);
	CHECK_EQ_INT(sl_rec_next(&it, &r), 1);
	char *s = sl_rec_str(&r);
	CHECK_STR(s, "dir/\xc3\xa9t\xc3\xa9.txt");
	free(s);
	CHECK_EQ_INT(sl_rec_next(&it, &r), 1);
	s = sl_rec_str(&r);
	CHECK_STR(s, "");
	free(s);
	CHECK_EQ_INT(sl_rec_next(&it, &r), 1);
	CHECK_EQ_INT(r.tag, 999);
	CHECK(r.len == 3 && memcmp(r.val, "\0\1\2", 3) == 0);
	CHECK_EQ_INT(sl_rec_next(&it, &r), 0);
	CHECK_EQ_INT(sl_rec_next(&it, &r), 0);
	sl_msg_free(&m);
	sl_msg_free(&m); /* idempotent */
}

static void test_wrong_sizes(void)
{
	uint8_t buf[16] = { 0 };
	struct sl_rec r = { .tag = 1, .val = buf };
	uint8_t u8;
	uint32_t u32;
	int32_t i32;
	uint64_t u64;
	int64_t i64;
	for (uint32_t len = 0; len <= 9; len++) {
		r.len = len;
		errno = 0;
		CHECK_EQ_INT(sl_rec_u8(&r, &u8), len == 1 ? 0 : -1);
		CHECK_EQ_INT(sl_rec_u32(&r, &u32), len == 4 ? 0 : -1);
		CHECK_EQ_INT(sl_rec_i32(&r, &i32), len == 4 ? 0 : -1);
		CHECK_EQ_INT(sl_rec_u64(&r, &u64), len == 8 ? 0 : -1);
		CHECK_EQ_INT(sl_rec_i64(&r, &i64), len == 8 ? 0 : -1);
		if (len != 1 && len != 4 && len != 8)
			CHECK_EQ_INT(errno, EPROTO);
	}
	/* NUL anywhere in a string is refused. */
	const uint8_t with_nul[][4] = { { 0, 'a', 'b', 'c' }, { 'a', 0, 'b', 'c' }, { 'a', 'b', 'c', 0 } };
	for (size_t i = 0; i < 3; i++) {
		struct sl_rec sr = { .tag = SL_TAG_PATH, .len = 4, .val = with_nul[i] };
		errno = 0;
		CHECK(sl_rec_str(&sr) == NULL);
		CHECK_EQ_INT(errno, EPROTO);
	}
}

static void test_truncated_records(void)
{
	struct sl_rec_iter it;
	struct sl_rec r;
	/* Fewer bytes than a record header. */
	for (size_t n = 1; n < 6; n++) {
		uint8_t b[6] = { 1, 0, 0, 0, 0, 0 };
		sl_rec_iter_init(&it, b, n);
		errno = 0;
		CHECK_EQ_INT(sl_rec_next(&it, &r), -1);
		CHECK_EQ_INT(errno, EPROTO);
	}
	/* A length reaching past the payload, by one and by a lot. */
	uint8_t b[10] = { 4, 0, 5, 0, 0, 0, 'a', 'b', 'c', 'd' };
	sl_rec_iter_init(&it, b, sizeof(b));
	CHECK_EQ_INT(sl_rec_next(&it, &r), -1);
	b[2] = 0xff, b[3] = 0xff, b[4] = 0xff, b[5] = 0xff;
	sl_rec_iter_init(&it, b, sizeof(b));
	CHECK_EQ_INT(sl_rec_next(&it, &r), -1);
	/* Exactly fitting, then a stray byte. */
	b[2] = 4, b[3] = b[4] = b[5] = 0;
	sl_rec_iter_init(&it, b, sizeof(b));
	CHECK_EQ_INT(sl_rec_next(&it, &r), 1);
	CHECK_EQ_INT(sl_rec_next(&it, &r), 0);
	uint8_t c[11];
	memcpy(c, b, 10);
	c[10] = 7;
	sl_rec_iter_init(&it, c, sizeof(c));
	CHECK_EQ_INT(sl_rec_next(&it, &r), 1);
	CHECK_EQ_INT(sl_rec_next(&it, &r), -1);
	/* Empty payload: clean end at once. */
	sl_rec_iter_init(&it, NULL, 0);
	CHECK_EQ_INT(sl_rec_next(&it, &r), 0);
}

static void test_msg_limits(void)
{
	static uint8_t big[MAXP + 1];
	struct sl_msg m;
	/* A raw payload of exactly the maximum fits; one more byte does not. */
	sl_msg_begin(&m, SL_MSG_DATA, 0, 1);
	sl_msg_put_raw(&m, big, MAXP);
	CHECK_EQ_INT(sl_msg_finish(&m), 0);
	CHECK_EQ_INT(m.len, HDR + MAXP);
	sl_msg_free(&m);

	sl_msg_begin(&m, SL_MSG_DATA, 0, 1);
	sl_msg_put_raw(&m, big, MAXP + 1);
	errno = 0;
	CHECK_EQ_INT(sl_msg_finish(&m), -1);
	CHECK_EQ_INT(errno, EMSGSIZE);
	CHECK(m.buf == NULL);
	sl_msg_free(&m);

	/* A record needs 6 bytes of header on top of its value. */
	sl_msg_begin(&m, SL_MSG_OK, 0, 1);
	sl_msg_put_bytes(&m, 1, big, MAXP - 6);
	CHECK_EQ_INT(sl_msg_finish(&m), 0);
	sl_msg_free(&m);
	sl_msg_begin(&m, SL_MSG_OK, 0, 1);
	sl_msg_put_bytes(&m, 1, big, MAXP - 5);
	sl_msg_put_u8(&m, 2, 1); /* ignored after the failure */
	CHECK_EQ_INT(sl_msg_finish(&m), -1);
	CHECK_EQ_INT(errno, EMSGSIZE);
	sl_msg_free(&m);

	/* Sizes that would overflow length arithmetic. */
	sl_msg_begin(&m, SL_MSG_OK, 0, 1);
	sl_msg_put_bytes(&m, 1, big, SIZE_MAX - 2);
	CHECK_EQ_INT(sl_msg_finish(&m), -1);
	sl_msg_free(&m);
	sl_msg_begin(&m, SL_MSG_OK, 0, 1);
	sl_msg_put_raw(&m, big, SIZE_MAX);
	CHECK_EQ_INT(sl_msg_finish(&m), -1);
	sl_msg_free(&m);
}

/* A stream of n frames of varied types and sizes; lens[i] its payloads. */
static uint8_t *make_stream(size_t n, size_t *total, uint32_t *lens, int with_max, int small)
{
	size_t cap = 0, len = 0;
	uint8_t *out = NULL;
	for (size_t i = 0; i < n; i++) {
		struct sl_msg m;
		uint32_t pl;
		if (with_max && i == n / 2)
			pl = MAXP;
		else
			pl = (uint32_t)(rng() % 3 == 0 && !small ? rng() % 70000 : rng() % 40);
		sl_msg_begin(&m, known_types[rng() % sizeof(known_types)],
			     (uint8_t)(rng() & SANDLOT_PROTO_FLAG_END), (uint32_t)i);
		uint8_t *tmp = malloc(pl ? pl : 1);
		for (uint32_t k = 0; k < pl; k++)
			tmp[k] = (uint8_t)(i + k);
		sl_msg_put_raw(&m, tmp, pl);
		free(tmp);
		CHECK_EQ_INT(sl_msg_finish(&m), 0);
		if (len + m.len > cap) {
			cap = (len + m.len) * 2;
			out = realloc(out, cap);
		}
		memcpy(out + len, m.buf, m.len);
		len += m.len;
		lens[i] = pl;
		sl_msg_free(&m);
	}
	*total = len;
	return out;
}

static void check_frame(const struct sl_frame_header *h, const uint8_t *p, uint32_t idx,
			const uint32_t *lens, int *bad)
{
	if (h->stream != idx || h->length != lens[idx]) {
		*bad = 1;
		return;
	}
	for (uint32_t k = 0; k < h->length; k++)
		if (p[k] != (uint8_t)(idx + k)) {
			*bad = 1;
			return;
		}
}

static void test_reader_byte_by_byte(void)
{
	uint32_t lens[40];
	size_t total;
	uint8_t *s = make_stream(40, &total, lens, 0, 0);
	struct sl_reader rd;
	sl_reader_init(&rd);
	uint32_t got = 0;
	int bad = 0;
	for (size_t i = 0; i < total; i++) {
		CHECK_EQ_INT(sl_reader_feed(&rd, s + i, 1), 0);
		struct sl_frame_header h;
		const uint8_t *p;
		int r;
		while ((r = sl_reader_next(&rd, &h, &p)) == 1)
			check_frame(&h, p, got++, lens, &bad);
		CHECK(r == 0);
	}
	CHECK_EQ_INT(got, 40);
	CHECK(!bad);
	sl_reader_free(&rd);
	free(s);
}

/* Every split of a 3-frame stream into two pieces, and random chunking of
 * a long stream through sl_reader_space/commit (the path a real read takes). */
static void test_reader_splits(void)
{
	uint32_t lens[200];
	size_t total;
	uint8_t *s = make_stream(3, &total, lens, 0, 1);
	for (size_t cut = 0; cut <= total; cut++) {
		struct sl_reader rd;
		sl_reader_init(&rd);
		uint32_t got = 0;
		int bad = 0;
		struct sl_frame_header h;
		const uint8_t *p;
		CHECK_EQ_INT(sl_reader_feed(&rd, s, cut), 0);
		while (sl_reader_next(&rd, &h, &p) == 1)
			check_frame(&h, p, got++, lens, &bad);
		CHECK_EQ_INT(sl_reader_feed(&rd, s + cut, total - cut), 0);
		while (sl_reader_next(&rd, &h, &p) == 1)
			check_frame(&h, p, got++, lens, &bad);
		CHECK_EQ_INT(got, 3);
		CHECK(!bad);
		sl_reader_free(&rd);
	}
	free(s);

	s = make_stream(200, &total, lens, 1, 0);
	for (int round = 0; round < 5; round++) {
		struct sl_reader rd;
		sl_reader_init(&rd);
		uint32_t got = 0;
		int bad = 0, zero_avail = 0;
		size_t off = 0, max_cap = 0;
		while (off < total) {
			size_t avail;
			uint8_t *sp = sl_reader_space(&rd, &avail);
			if (!sp || avail == 0) {
				zero_avail = 1;
				break;
			}
			size_t n = 1 + rng() % (round == 0 ? 7 : 200000);
			if (n > avail)
				n = avail;
			if (n > total - off)
				n = total - off;
			memcpy(sp, s + off, n);
			sl_reader_commit(&rd, n);
			off += n;
			if (rd.cap > max_cap)
				max_cap = rd.cap;
			struct sl_frame_header h;
			const uint8_t *p;
			while (sl_reader_next(&rd, &h, &p) == 1)
				check_frame(&h, p, got++, lens, &bad);
		}
		CHECK(!zero_avail);
		CHECK_EQ_INT(got, 200);
		CHECK(!bad);
		CHECK(max_cap <= HDR + MAXP);
		sl_reader_free(&rd);
	}
	free(s);
}

static void test_reader_rejects(void)
{
	uint8_t b[HDR];
	struct sl_frame_header h;
	const uint8_t *p;
	struct {
		uint32_t len;
		uint8_t type, flags;
		uint16_t rsv;
	} bad[] = {
		{ MAXP + 1, SL_MSG_DATA, 0, 0 }, /* rejected before any payload arrives */
		{ 0, 0x99, 0, 0 },
		{ 0, 0x00, 0, 0 },
		{ 0, SL_MSG_DATA, 0x02, 0 },
		{ 0, SL_MSG_DATA, 0x80, 0 },
		{ 0, SL_MSG_DATA, 0, 0x0100 },
	};
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(bad); i++) {
		struct sl_reader rd;
		sl_reader_init(&rd);
		/* One good frame first: it is delivered, then the bad one kills. */
		sl_header_encode(b, 0, SL_MSG_PING, 0, 5);
		CHECK_EQ_INT(sl_reader_feed(&rd, b, HDR), 0);
		raw_header(b, bad[i].len, bad[i].type, bad[i].flags, bad[i].rsv, 1);
		CHECK_EQ_INT(sl_reader_feed(&rd, b, HDR), 0);
		CHECK_EQ_INT(sl_reader_next(&rd, &h, &p), 1);
		CHECK_EQ_INT(h.stream, 5);
		errno = 0;
		CHECK_EQ_INT(sl_reader_next(&rd, &h, &p), -1);
		CHECK_EQ_INT(errno, EPROTO);
		CHECK(rd.broken);
		/* Broken for good, whatever follows. */
		sl_header_encode(b, 0, SL_MSG_PING, 0, 6);
		sl_reader_feed(&rd, b, HDR);
		CHECK_EQ_INT(sl_reader_next(&rd, &h, &p), -1);
		sl_reader_free(&rd);
	}
	/* A header that is incomplete is not judged yet. */
	struct sl_reader rd;
	sl_reader_init(&rd);
	raw_header(b, 0, 0x99, 0, 0, 1);
	CHECK_EQ_INT(sl_reader_feed(&rd, b, HDR - 1), 0);
	CHECK_EQ_INT(sl_reader_next(&rd, &h, &p), 0);
	CHECK_EQ_INT(sl_reader_feed(&rd, b + HDR - 1, 1), 0);
	CHECK_EQ_INT(sl_reader_next(&rd, &h, &p), -1);
	sl_reader_free(&rd);
}

/* Memory stays bounded by one maximal frame: many maximal frames pass
 * through without growth, and a feed that would exceed it is refused
 * without being half-applied. */
static void test_reader_bounded(void)
{
	static uint8_t frame[HDR + MAXP];
	sl_header_encode(frame, MAXP, SL_MSG_DATA, 0, 3);
	struct sl_reader rd;
	sl_reader_init(&rd);
	struct sl_frame_header h;
	const uint8_t *p;
	for (int i = 0; i < 20; i++) {
		size_t off = 0;
		while (off < sizeof(frame)) {
			size_t avail;
			uint8_t *sp = sl_reader_space(&rd, &avail);
			CHECK(sp != NULL && avail > 0);
			if (!sp)
				break;
			size_t n = avail < sizeof(frame) - off ? avail : sizeof(frame) - off;
			memcpy(sp, frame + off, n);
			sl_reader_commit(&rd, n);
			off += n;
		}
		CHECK_EQ_INT(sl_reader_next(&rd, &h, &p), 1);
		CHECK_EQ_INT(h.length, MAXP);
		CHECK(rd.cap <= HDR + MAXP);
	}
	/* Without popping, the buffer is full: no space, no partial feed. */
	CHECK_EQ_INT(sl_reader_feed(&rd, frame, sizeof(frame)), 0);
	CHECK(rd.cap <= HDR + MAXP);
	size_t len_before = rd.len;
	errno = 0;
	CHECK_EQ_INT(sl_reader_feed(&rd, frame, 1), -1);
	CHECK_EQ_INT(errno, ENOBUFS);
	CHECK_EQ_INT(rd.len, len_before);
	size_t avail = 123;
	CHECK(sl_reader_space(&rd, &avail) == NULL);
	CHECK_EQ_INT(sl_reader_next(&rd, &h, &p), 1);
	CHECK_EQ_INT(sl_reader_next(&rd, &h, &p), 0);
	CHECK_EQ_INT(sl_reader_feed(&rd, frame, 1), 0);
	sl_reader_free(&rd);

	/* A flood of tiny frames in one buffer pops in linear time: 100k
	 * frames must not take seconds (a per-pop memmove would). */
	size_t n = 100000, len = n * HDR;
	uint8_t *many = malloc(len);
	for (size_t i = 0; i < n; i++)
		sl_header_encode(many + i * HDR, 0, SL_MSG_PING, 0, (uint32_t)i);
	sl_reader_init(&rd);
	size_t got = 0, off = 0;
	while (off < len) {
		size_t chunk = len - off < 600000 ? len - off : 600000;
		CHECK_EQ_INT(sl_reader_feed(&rd, many + off, chunk), 0);
		off += chunk;
		while (sl_reader_next(&rd, &h, &p) == 1)
			got += h.stream == got;
	}
	CHECK_EQ_INT(got, n);
	sl_reader_free(&rd);
	free(many);
}

static void test_reader_empty_payload(void)
{
	uint8_t b[2 * HDR];
	sl_header_encode(b, 0, SL_MSG_SHUTDOWN, 0, 0);
	sl_header_encode(b + HDR, 0, SL_MSG_DATA, SANDLOT_PROTO_FLAG_END, 9);
	struct sl_reader rd;
	sl_reader_init(&rd);
	CHECK_EQ_INT(sl_reader_feed(&rd, b, sizeof(b)), 0);
	struct sl_frame_header h;
	const uint8_t *p;
	CHECK_EQ_INT(sl_reader_next(&rd, &h, &p), 1);
	CHECK(h.type == SL_MSG_SHUTDOWN && h.length == 0);
	CHECK_EQ_INT(sl_reader_next(&rd, &h, &p), 1);
	CHECK(h.type == SL_MSG_DATA && h.flags == SANDLOT_PROTO_FLAG_END && h.stream == 9);
	CHECK_EQ_INT(sl_reader_next(&rd, &h, &p), 0);
	sl_reader_free(&rd);
	sl_reader_free(&rd);
}

int main(void)
{
	TAP_RUN(test_header_roundtrip);
	TAP_RUN(test_header_types);
	TAP_RUN(test_header_rejects);
	TAP_RUN(test_records_roundtrip);
	TAP_RUN(test_wrong_sizes);
	TAP_RUN(test_truncated_records);
	TAP_RUN(test_msg_limits);
	TAP_RUN(test_reader_byte_by_byte);
	TAP_RUN(test_reader_splits);
	TAP_RUN(test_reader_rejects);
	TAP_RUN(test_reader_bounded);
	TAP_RUN(test_reader_empty_payload);
	return tap_done();
}
