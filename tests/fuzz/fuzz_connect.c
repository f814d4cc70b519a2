/* Fuzz entry point for the Connect codec of the E2B API
 * (src/daemon/e2b_connect.c): what E2B's SDKs send as a request body.
 *
 * The input is used as:
 *   - a stream of envelopes, walked with e2b_envelope_next() from every
 *     cut of it into two reads (as bodies arrive), checked against a
 *     plain reading of the header: a frame is reported exactly when the
 *     whole of it is there, points into the input, and re-encoding its
 *     payload with e2b_connect_frame() of the same JSON gives a valid
 *     frame again;
 *   - a whole request body, unary and streamed (e2b_connect_request()):
 *     it is accepted only as a JSON object, and then every field
 *     accessor runs on every member;
 *   - a JSON string for e2b_pj_bytes(), whose result must re-encode to
 *     the same bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "common/base64.h"
#include "daemon/e2b_connect.h"
#include "fuzz.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

static void walk(const uint8_t *data, size_t size, uint32_t max)
{
	size_t off = 0;
	while (off <= size) {
		uint8_t flags;
		const uint8_t *payload;
		uint32_t plen;
		size_t used;
		char msg[160];
		int rc = e2b_envelope_next(data + off, size - off, max, &flags, &payload, &plen,
					   &used, msg, sizeof(msg));
		size_t left = size - off;
		if (left < E2B_ENVELOPE_HEADER) {
			check(rc == 0);
			return;
		}
		const uint8_t *h = data + off;
		uint32_t n = (uint32_t)h[1] << 24 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 8 | h[4];
		if (n > max) {
			check(rc == -1 && msg[0]);
			return;
		}
		if (left - E2B_ENVELOPE_HEADER < n) {
			check(rc == 0);
			return;
		}
		check(rc == 1 && flags == h[0] && plen == n && payload == h + E2B_ENVELOPE_HEADER &&
		      used == E2B_ENVELOPE_HEADER + (size_t)n);
		off += used;
	}
}

static void fields(json_t *obj)
{
	const char *key;
	json_t *v;
	json_object_foreach(obj, key, v)
	{
		int bad = 0;
		uint32_t u;
		int b;
		const char *s = e2b_pj_string(obj, key, NULL, &bad);
		check(!s || json_is_string(v));
		if (e2b_pj_uint32(obj, key, NULL, &u) == 0 && json_is_integer(v))
			check((json_int_t)u == json_integer_value(v));
		if (e2b_pj_bool(obj, key, NULL, 0, &b) == 0 && json_is_boolean(v))
			check(b == json_is_true(v));
		size_t len;
		unsigned char *bytes = e2b_pj_bytes(v, &len);
		if (bytes) {
			char *again = sandlot__base64_encode_alloc(bytes, len, NULL);
			check(again != NULL);
			size_t n2;
			json_t *js = json_string(again);
			unsigned char *back = e2b_pj_bytes(js, &n2);
			check(back && n2 == len && memcmp(back, bytes, len) == 0);
			free(back);
			json_decref(js);
			free(again);
			free(bytes);
		}
		check(e2b_pj_get(obj, key, NULL) == (json_is_null(v) ? NULL : v));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	walk(data, size, E2B_CONNECT_MAX_MESSAGE);
	walk(data, size, 64);
	for (int stream = 0; stream < 2; stream++) {
		char msg[256];
		json_t *m = e2b_connect_request(stream, data, size, msg, sizeof(msg));
		if (!m) {
			check(msg[0] != '\0');
			continue;
		}
		check(json_is_object(m));
		fields(m);
		/* what sandlotd sends back frames the same message */
		size_t len;
		char *frame = e2b_connect_frame(m, 0, &len);
		check(frame != NULL);
		json_t *again = e2b_connect_request(1, frame, len, msg, sizeof(msg));
		check(again && json_equal(again, m));
		json_decref(again);
		free(frame);
		json_decref(m);
	}
	json_t *s = json_stringn((const char *)data, size);
	if (s) {
		size_t len;
		unsigned char *b = e2b_pj_bytes(s, &len);
		free(b);
		json_decref(s);
	}
	return 0;
}
