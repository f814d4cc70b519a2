/* Base64 (RFC 4648, standard alphabet "A-Za-z0-9+/", '=' padding): the one
 * encoder and decoder of the daemon, the CLI and the MCP server.  libc only;
 * fuzzed by tests/fuzz/fuzz_base64.c. */
#ifndef SANDLOT_COMMON_BASE64_H
#define SANDLOT_COMMON_BASE64_H

#include <stddef.h>
#include <sys/types.h>

/* Length of the encoding of n bytes (without a NUL): 4 * ceil(n / 3).
 * SIZE_MAX if that does not fit in a size_t. */
size_t sandlot__base64_encoded_len(size_t n);

/* Encode n bytes of in into out, which has room for
 * sandlot__base64_encoded_len(n) + 1 bytes; out is NUL-terminated and
 * padded with '='.  Returns the length written (without the NUL). */
size_t sandlot__base64_encode(const void *in, size_t n, char *out);

/* Encode into a new NUL-terminated string (the caller frees it); its
 * length in *out_len when out_len is not NULL.  NULL (errno ENOMEM) when
 * memory runs out. */
char *sandlot__base64_encode_alloc(const void *in, size_t n, size_t *out_len);

/* The most bytes that decoding len characters can give: len / 4 * 3 + 2. */
size_t sandlot__base64_decoded_max(size_t len);

/* Decode len characters of in into out, which has room for
 * sandlot__base64_decoded_max(len) bytes (in and out may not overlap).
 * Padding is optional and whitespace (space, tab, CR, LF) is skipped
 * anywhere.  Returns the decoded length, or -1 (errno EINVAL, out holds
 * garbage) when in has a character outside the alphabet (a NUL included),
 * data after '=', more than two '=', or one character too many (a group
 * of 4 with a single character left over carries no whole byte). */
ssize_t sandlot__base64_decode(const char *in, size_t len, unsigned char *out);

#endif
