/* Percent-decoding (RFC 3986 "%XX") of URL path segments.  libc only;
 * fuzzed by tests/fuzz/fuzz_percent.c. */
#ifndef SANDLOT_COMMON_PERCENT_H
#define SANDLOT_COMMON_PERCENT_H

#include <stddef.h>

/* Decode [s, s + n) into a new NUL-terminated string (the caller frees
 * it): each "%XX" (two hex digits, either case) becomes the byte XX, every
 * other byte stays as it is ('+' included: this is a path, not a form).
 * NULL with errno EINVAL on a '%' not followed by two hex digits, or on a
 * NUL byte in the result (encoded as "%00", or raw in the input): no
 * caller can pass a string with a NUL on without cutting it short.  NULL
 * with errno ENOMEM when memory runs out. */
char *sandlot__percent_decode(const char *s, size_t n);

#endif
