/* Fuzz entry point for base64 (src/common/base64.c).
 *
 * The input is used twice:
 *   - as text to decode, checked against a plain reference: it decodes
 *     exactly when, whitespace dropped, it is alphabet characters then at
 *     most two '=', with no lone character after the last whole group of
 *     four; the decoded length is then 3 bytes per 4 characters (rounded
 *     down), and encoding the result and decoding that gives it back;
 *   - as bytes to encode: the length is sandlot__base64_encoded_len(),
 *     only alphabet characters and trailing '=' come out, and decoding
 *     gives the bytes back.
 */
#include <stdlib.h>
#include <string.h>

#include "common/base64.h"
#include "fuzz.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

static int in_alphabet(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '+' || c == '/';
}

/* -1 if text is not base64, else the length it decodes to. */
static long reference_len(const uint8_t *p, size_t n)
{
	size_t data = 0, pad = 0;
	for (size_t i = 0; i < n; i++) {
		if (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n')
			continue;
		if (p[i] == '=') {
			pad++;
			continue;
		}
		if (!in_alphabet(p[i]) || pad)
			return -1;
		data++;
	}
	if (pad > 2 || data % 4 == 1)
		return -1;
	return (long)(data * 6 / 8);
}

static void decode_text(const uint8_t *data, size_t size)
{
	unsigned char *out = malloc(sandlot__base64_decoded_max(size) + 1);
	check(out != NULL);
	ssize_t n = sandlot__base64_decode((const char *)data, size, out);
	check(n == reference_len(data, size));
	if (n >= 0) {
		size_t elen;
		char *enc = sandlot__base64_encode_alloc(out, (size_t)n, &elen);
		check(enc != NULL && elen == sandlot__base64_encoded_len((size_t)n));
		unsigned char *back = malloc(sandlot__base64_decoded_max(elen) + 1);
		check(back != NULL);
		check(sandlot__base64_decode(enc, elen, back) == n && memcmp(back, out, (size_t)n) == 0);
		free(back);
		free(enc);
	}
	free(out);
}

static void encode_bytes(const uint8_t *data, size_t size)
{
	size_t elen;
	char *enc = sandlot__base64_encode_alloc(data, size, &elen);
	check(enc != NULL && elen == sandlot__base64_encoded_len(size) && enc[elen] == '\0');
	check(elen % 4 == 0 && strlen(enc) == elen);
	size_t pad = 0;
	for (size_t i = 0; i < elen; i++) {
		if (enc[i] == '=')
			pad++;
		else
			check(in_alphabet((unsigned char)enc[i]) && pad == 0);
	}
	check(pad == (3 - size % 3) % 3);
	unsigned char *back = malloc(sandlot__base64_decoded_max(elen) + 1);
	check(back != NULL);
	check(sandlot__base64_decode(enc, elen, back) == (ssize_t)size);
	check(size == 0 || memcmp(back, data, size) == 0);
	free(back);
	free(enc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	decode_text(data, size);
	encode_bytes(data, size);
	return 0;
}
