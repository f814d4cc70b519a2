/* The E2B-compatible API's part of authentication (contract in e2b.h):
 * which requests may carry a key in E2B's headers, the check of those
 * headers, and the per-sandbox access token.  Pure functions of their
 * input. */
#include <nettle/hmac.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

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

int e2b_host_parse(const char *host, size_t len, const char *domain, struct e2b_host *out)
{
	memset(out, 0, sizeof(*out));
	if (!host || !domain || !*domain)
		return 0;
	/* NAME[:PORT]: a bracketed IPv6 literal never names a sandbox. */
	size_t n = len;
	for (size_t i = len; i > 0; i--) {
		if (host[i - 1] == ':') {
			n = i - 1;
			break;
		}
		if (host[i - 1] < '0' || host[i - 1] > '9')
			break;
	}
	if (n > 0 && host[n - 1] == '.')
		n--;
	size_t dl = strlen(domain);
	if (n < dl + 2 || host[n - dl - 1] != '.' || strncasecmp(host + n - dl, domain, dl) != 0)
		return 0;
	const char *label = host;
	size_t ll = n - dl - 1;
	const char *dash = memchr(label, '-', ll);
	if (!dash || memchr(label, '.', ll)) {
		out->bad = "the host must be PORT-SANDBOXID.DOMAIN (as getHost(port) gives)";
		return 1;
	}
	size_t pl = (size_t)(dash - label);
	unsigned long port = 0;
	for (size_t i = 0; i < pl; i++) {
		if (label[i] < '0' || label[i] > '9' || port > 65535) {
			port = 0;
			pl = 0;
			break;
		}
		port = port * 10 + (unsigned long)(label[i] - '0');
	}
	if (pl == 0 || port < 1 || port > 65535) {
		out->bad = "the port in the host must be a number from 1 to 65535";
		return 1;
	}
	size_t il = ll - pl - 1;
	if (il == 0 || il >= sizeof(out->id)) {
		out->bad = "the host names no sandbox id (PORT-SANDBOXID.DOMAIN)";
		return 1;
	}
	for (size_t i = 0; i < il; i++) {
		char c = dash[1 + i];
		c = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) {
			out->id[0] = '\0';
			out->bad = "the sandbox id in the host may hold only letters, digits and '-'";
			return 1;
		}
		out->id[i] = c;
	}
	out->id[il] = '\0';
	out->port = (unsigned)port;
	return 1;
}

int e2b_host_key_ok(const char *token, const char *auth, size_t auth_len,
		    const struct e2b_keys *k, const char *id)
{
	if (!token || !*token)
		return 0;
	char bearer[600];
	int bl = snprintf(bearer, sizeof(bearer), "Bearer %s", token);
	int ok = bl > 0 && (size_t)bl < sizeof(bearer) && same(bearer, auth, auth_len);
	ok |= same(token, k->api_key, k->api_key_len);
	ok |= same(token, k->access_token, k->access_token_len);
	ok |= same(token, k->traffic_token, k->traffic_token_len);
	char scoped[E2B_ACCESS_TOKEN_LEN + 1];
	e2b_access_token(token, id ? id : "", id ? strlen(id) : 0, scoped);
	int sandbox = id && *id;
	ok |= sandbox & same(scoped, k->access_token, k->access_token_len);
	ok |= sandbox & same(scoped, k->traffic_token, k->traffic_token_len);
	return ok;
}
