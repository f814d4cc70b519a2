/* The E2B-compatible API's part of authentication (contract in e2b.h):
 * which requests may carry a key in E2B's headers, the check of those
 * headers, and the per-sandbox access token.  Pure functions of their
 * input. */
#include <nettle/hmac.h>
#include <stdio.h>
#include <string.h>

#include "daemon/e2b.h"

int e2b_path(const char *target, size_t len)
{
	size_t n = strlen(E2B_PREFIX);
	if (!target || len < n || memcmp(target, E2B_PREFIX, n) != 0)
		return 0;
	return len == n || target[n] == '/' || target[n] == '?';
}

int e2b_control_path(const char *target, size_t len)
{
	if (!e2b_path(target, len))
		return 0;
	size_t n = strlen(E2B_PREFIX);
	if (len <= n + 1 || target[n] != '/')
		return 1; /* "/e2b", "/e2b?...", "/e2b/": not a sandbox's */
	const char *seg = target + n + 1;
	size_t sl = 0;
	while (n + 1 + sl < len && seg[sl] != '/' && seg[sl] != '?')
		sl++;
	/* The top-level segments of E2B's control plane (its OpenAPI spec). */
	static const char *const control[] = { "sandboxes", "v1", "v2", "v3", "templates",
					       "snapshots", "teams", "secrets", "volumes",
					       "api-keys", "access-tokens", "nodes", "admin" };
	for (size_t i = 0; i < sizeof(control) / sizeof(control[0]); i++)
		if (strlen(control[i]) == sl && memcmp(seg, control[i], sl) == 0)
			return 1;
	return 0;
}

void e2b_access_token(const char *token, const char *sandbox_id, size_t id_len,
		      char out[E2B_ACCESS_TOKEN_LEN + 1])
{
	struct hmac_sha256_ctx ctx;
	hmac_sha256_set_key(&ctx, strlen(token), (const uint8_t *)token);
	static const char label[] = "sandlot-e2b-access:";
	hmac_sha256_update(&ctx, sizeof(label) - 1, (const uint8_t *)label);
	hmac_sha256_update(&ctx, id_len, (const uint8_t *)sandbox_id);
	uint8_t mac[SHA256_DIGEST_SIZE];
	hmac_sha256_digest(&ctx, sizeof(mac), mac);
	memcpy(out, "sbat_", 5);
	for (size_t i = 0; i < sizeof(mac); i++)
		snprintf(out + 5 + 2 * i, 3, "%02x", mac[i]);
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

int e2b_key_ok(const char *token, const struct e2b_keys *k)
{
	if (!token || !*token)
		return 0;
	/* Every comparison is made whatever the others give, so that the
	 * time does not tell which header was right. */
	int ok = same(token, k->api_key, k->api_key_len);
	ok |= same(token, k->access_token, k->access_token_len);
	ok |= same(token, k->traffic_token, k->traffic_token_len);
	int sandbox_call = k->sandbox_id && k->sandbox_id_len > 0 &&
			   !e2b_control_path(k->target, k->target_len);
	char scoped[E2B_ACCESS_TOKEN_LEN + 1];
	e2b_access_token(token, sandbox_call ? k->sandbox_id : "", sandbox_call ? k->sandbox_id_len : 0,
			 scoped);
	ok |= sandbox_call & same(scoped, k->access_token, k->access_token_len);
	ok |= sandbox_call & same(scoped, k->traffic_token, k->traffic_token_len);
	return ok;
}
