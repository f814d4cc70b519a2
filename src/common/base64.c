#include "base64.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

enum { PAD = 64, SPACE = 65, BAD = 66 };

/* The value of a character: 0-63 in the alphabet, else PAD, SPACE or BAD.
 * Computed, not looked up in a table filled at first use: the daemon calls
 * this from many threads at once. */
static unsigned value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	switch (c) {
	case '+': return 62;
	case '/': return 63;
	case '=': return PAD;
	case ' ': case '\t': case '\r': case '\n': return SPACE;
	default: return BAD;
	}
}

size_t sandlot__base64_encoded_len(size_t n)
{
	size_t groups = n / 3 + (n % 3 != 0);
	return groups > SIZE_MAX / 4 ? SIZE_MAX : groups * 4;
}

size_t sandlot__base64_encode(const void *in_, size_t n, char *out)
{
	const unsigned char *in = in_;
	size_t o = 0, i = 0;
	for (; n - i >= 3; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
		out[o++] = alphabet[v >> 18];
		out[o++] = alphabet[(v >> 12) & 63];
		out[o++] = alphabet[(v >> 6) & 63];
		out[o++] = alphabet[v & 63];
	}
	if (i < n) {
		uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0);
		out[o++] = alphabet[v >> 18];
		out[o++] = alphabet[(v >> 12) & 63];
		out[o++] = i + 1 < n ? alphabet[(v >> 6) & 63] : '=';
		out[o++] = '=';
	}
	out[o] = '\0';
	return o;
}

char *sandlot__base64_encode_alloc(const void *in, size_t n, size_t *out_len)
{
	size_t len = sandlot__base64_encoded_len(n);
	char *out = len == SIZE_MAX ? NULL : malloc(len + 1);
	if (!out) {
		errno = ENOMEM;
		return NULL;
	}
	len = sandlot__base64_encode(in, n, out);
	if (out_len)
		*out_len = len;
	return out;
}

size_t sandlot__base64_decoded_max(size_t len)
{
	return len / 4 * 3 + 2;
}

ssize_t sandlot__base64_decode(const char *in_, size_t len, unsigned char *out)
{
	const unsigned char *in = (const unsigned char *)in_;
	size_t i = 0, o = 0;
	/* Fast path: whole groups of four alphabet characters. */
	while (len - i >= 4) {
		unsigned a = value(in[i]), b = value(in[i + 1]), c = value(in[i + 2]),
			 d = value(in[i + 3]);
		if ((a | b | c | d) >= 64)
			break;
		uint32_t v = a << 18 | b << 12 | c << 6 | d;
		out[o++] = (unsigned char)(v >> 16);
		out[o++] = (unsigned char)(v >> 8);
		out[o++] = (unsigned char)v;
		i += 4;
	}
	/* The rest one character at a time: whitespace, padding, the end. */
	uint32_t acc = 0;
	unsigned bits = 0, pad = 0;
	for (; i < len; i++) {
		unsigned v = value(in[i]);
		if (v == SPACE)
			continue;
		if (v == PAD) {
			if (++pad > 2)
				goto bad;
			continue;
		}
		if (v == BAD || pad)
			goto bad;
		acc = (acc << 6 | v) & 0xffffff;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[o++] = (unsigned char)(acc >> bits);
		}
	}
	/* Six bits left over: a lone character after the last whole group. */
	if (bits >= 6)
		goto bad;
	return (ssize_t)o;
bad:
	errno = EINVAL;
	return -1;
}
