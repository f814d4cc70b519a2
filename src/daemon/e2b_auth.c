/* The E2B-compatible API's part of authentication (contract in e2b.h):
 * which requests may carry the token in E2B's headers, and the check of
 * those headers.  Pure functions of their input. */
#include <string.h>

#include "daemon/e2b.h"

int e2b_path(const char *target, size_t len)
{
	size_t n = strlen(E2B_PREFIX);
	if (!target || len < n || memcmp(target, E2B_PREFIX, n) != 0)
		return 0;
	return len == n || target[n] == '/' || target[n] == '?';
}

/* Whether got[0, gl) is want: the time depends on the lengths only. */
static int same(const char *want, const char *got, size_t gl)
{
	if (!got)
		return 0;
	size_t wl = strlen(want);
	unsigned char diff = gl != wl;
	for (size_t i = 0; i < wl; i++)
		diff |= (unsigned char)(want[i] ^ (i < gl ? got[i] : 0));
	return diff == 0;
}

int e2b_key_ok(const char *token, const char *api_key, size_t api_key_len,
	       const char *access_token, size_t access_token_len)
{
	if (!token || !*token)
		return 0;
	/* Both compared whatever the first gives, so that the time does not
	 * tell which header was right. */
	int a = same(token, api_key, api_key_len);
	int b = same(token, access_token, access_token_len);
	return a | b;
}
