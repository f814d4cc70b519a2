/* Connect RPC's wire format with the JSON codec (e2b_connect.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/e2b_connect.h"
#include "common/base64.h"
#include "common/json.h"

int e2b_envelope_next(const uint8_t *buf, size_t len, uint32_t max, uint8_t *flags,
		      const uint8_t **payload, uint32_t *plen, size_t *used, char *msg,
		      size_t msglen)
{
	if (len < E2B_ENVELOPE_HEADER)
		return 0;
	uint32_t n = (uint32_t)buf[1] << 24 | (uint32_t)buf[2] << 16 | (uint32_t)buf[3] << 8 |
		     (uint32_t)buf[4];
	if (n > max) {
		snprintf(msg, msglen, "a message of %u bytes is over the limit of %u bytes", n,
			 max);
		return -1;
	}
	if (len - E2B_ENVELOPE_HEADER < n)
		return 0;
	*flags = buf[0];
	*payload = buf + E2B_ENVELOPE_HEADER;
	*plen = n;
	*used = E2B_ENVELOPE_HEADER + (size_t)n;
	return 1;
}

static json_t *parse_object(const void *data, size_t len, char *msg, size_t msglen)
{
	json_error_t je;
	/* An empty message may be sent as no bytes at all. */
	if (len == 0)
		return json_object();
	json_t *v = json_loadb(data, len, JSON_REJECT_DUPLICATES, &je);
	if (!v) {
		snprintf(msg, msglen, "the request message is not valid JSON: %s", je.text);
		return NULL;
	}
	if (!json_is_object(v)) {
		json_decref(v);
		snprintf(msg, msglen, "the request message is not a JSON object");
		return NULL;
	}
	return v;
}

json_t *e2b_connect_request(int stream, const void *body, size_t len, char *msg, size_t msglen)
{
	if (!stream)
		return parse_object(body, len, msg, msglen);
	uint8_t flags;
	const uint8_t *payload;
	uint32_t plen;
	size_t used;
	int rc = e2b_envelope_next(body, len, E2B_CONNECT_MAX_MESSAGE, &flags, &payload, &plen,
				   &used, msg, msglen);
	if (rc < 0)
		return NULL;
	if (rc == 0) {
		snprintf(msg, msglen, "the request body ends inside its envelope (%zu bytes)",
			 len);
		return NULL;
	}
	if (used != len) {
		snprintf(msg, msglen,
			 "the request body holds more than one message (a server stream takes one)");
		return NULL;
	}
	if (flags & E2B_ENVELOPE_COMPRESSED) {
		snprintf(msg, msglen, "compressed messages are not supported");
		return NULL;
	}
	if (flags != 0) {
		snprintf(msg, msglen, "the request envelope has unknown flags 0x%02x", flags);
		return NULL;
	}
	return parse_object(payload, plen, msg, msglen);
}

static char *frame_bytes(const char *text, size_t n, uint8_t flags, size_t *len)
{
	if (n > UINT32_MAX)
		return NULL;
	char *out = malloc(E2B_ENVELOPE_HEADER + n);
	if (!out)
		return NULL;
	out[0] = (char)flags;
	out[1] = (char)(n >> 24);
	out[2] = (char)(n >> 16);
	out[3] = (char)(n >> 8);
	out[4] = (char)n;
	memcpy(out + E2B_ENVELOPE_HEADER, text, n);
	*len = E2B_ENVELOPE_HEADER + n;
	return out;
}

char *e2b_connect_frame(json_t *msg, uint8_t flags, size_t *len)
{
	char *text = json_dumps(msg, JSON_COMPACT);
	if (!text)
		return NULL;
	char *out = frame_bytes(text, strlen(text), flags, len);
	free(text);
	return out;
}

json_t *e2b_connect_error_body(const char *code, const char *message)
{
	/* the message may quote what the client sent: any bytes */
	const char *m = message ? message : "";
	return json_pack("{s:s, s:o}", "code", code, "message", json_text(m, strlen(m)));
}

char *e2b_connect_end_frame(const char *code, const char *message, size_t *len)
{
	json_t *end = code ? json_pack("{s:o}", "error", e2b_connect_error_body(code, message))
			   : json_object();
	if (!end)
		return NULL;
	char *out = e2b_connect_frame(end, E2B_ENVELOPE_END, len);
	json_decref(end);
	return out;
}

static const struct {
	const char *code;
	int status;
} codes[] = {
	{ "canceled", 499 },          { "unknown", 500 },
	{ "invalid_argument", 400 },  { "deadline_exceeded", 504 },
	{ "not_found", 404 },         { "already_exists", 409 },
	{ "permission_denied", 403 }, { "resource_exhausted", 429 },
	{ "failed_precondition", 400 }, { "aborted", 409 },
	{ "out_of_range", 400 },      { "unimplemented", 501 },
	{ "internal", 500 },          { "unavailable", 503 },
	{ "data_loss", 500 },         { "unauthenticated", 401 },
};

int e2b_connect_http_status(const char *code)
{
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		if (strcmp(codes[i].code, code) == 0)
			return codes[i].status;
	return 500;
}

const char *e2b_connect_code_from_errno(int status)
{
	switch (status) {
	case ENOENT:
		return "not_found";
	case EEXIST:
		return "already_exists";
	case EISDIR:
	case ENOTDIR:
	case EINVAL:
	case ENAMETOOLONG:
	case ELOOP:
	case ENOTEMPTY:
		return "invalid_argument";
	case EACCES:
	case EPERM:
		return "permission_denied";
	case ENOSPC:
	case EDQUOT:
	case EFBIG:
		return "resource_exhausted";
	case EPIPE:
		return "unavailable";
	case ETIMEDOUT:
		return "deadline_exceeded";
	default:
		return "internal";
	}
}

/* ---- protobuf JSON fields ------------------------------------------------ */

json_t *e2b_pj_get(json_t *obj, const char *camel, const char *snake)
{
	if (!json_is_object(obj))
		return NULL;
	json_t *v = camel ? json_object_get(obj, camel) : NULL;
	if ((!v || json_is_null(v)) && snake)
		v = json_object_get(obj, snake);
	return v && !json_is_null(v) ? v : NULL;
}

const char *e2b_pj_string(json_t *obj, const char *camel, const char *snake, int *bad)
{
	json_t *v = e2b_pj_get(obj, camel, snake);
	if (!v)
		return NULL;
	if (!json_is_string(v)) {
		*bad = 1;
		return NULL;
	}
	return json_string_value(v);
}

int e2b_pj_uint32(json_t *obj, const char *camel, const char *snake, uint32_t *out)
{
	json_t *v = e2b_pj_get(obj, camel, snake);
	*out = 0;
	if (!v)
		return 0;
	if (json_is_integer(v)) {
		json_int_t i = json_integer_value(v);
		if (i < 0 || i > (json_int_t)UINT32_MAX)
			return -1;
		*out = (uint32_t)i;
		return 0;
	}
	if (json_is_real(v)) {
		double d = json_real_value(v);
		if (!(d >= 0 && d <= (double)UINT32_MAX) || d != (double)(uint32_t)d)
			return -1;
		*out = (uint32_t)d;
		return 0;
	}
	if (!json_is_string(v))
		return -1;
	const char *s = json_string_value(v);
	size_t n = json_string_length(v);
	if (n == 0 || n > 10)
		return -1;
	uint64_t x = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		x = x * 10 + (uint64_t)(s[i] - '0');
	}
	if (x > UINT32_MAX)
		return -1;
	*out = (uint32_t)x;
	return 0;
}

int e2b_pj_bool(json_t *obj, const char *camel, const char *snake, int dflt, int *out)
{
	json_t *v = e2b_pj_get(obj, camel, snake);
	*out = dflt;
	if (!v)
		return 0;
	if (!json_is_boolean(v))
		return -1;
	*out = json_is_true(v);
	return 0;
}

unsigned char *e2b_pj_bytes(json_t *v, size_t *len)
{
	if (!json_is_string(v))
		return NULL;
	size_t n = json_string_length(v);
	const char *s = json_string_value(v);
	/* The URL-safe alphabet differs in two characters. */
	char *std = malloc(n + 1);
	unsigned char *out = malloc(sandlot__base64_decoded_max(n) + 1);
	if (!std || !out) {
		free(std);
		free(out);
		return NULL;
	}
	for (size_t i = 0; i < n; i++)
		std[i] = s[i] == '-' ? '+' : s[i] == '_' ? '/' : s[i];
	ssize_t got = sandlot__base64_decode(std, n, out);
	free(std);
	if (got < 0) {
		free(out);
		return NULL;
	}
	*len = (size_t)got;
	return out;
}
