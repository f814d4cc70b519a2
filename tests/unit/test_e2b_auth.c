/* The E2B-compatible API's part of authentication (src/daemon/e2b_auth.c):
 * which request targets are under /e2b, and the check of E2B's key headers.
 * The front door and the HTTP layer call these on every TCP request, so
 * a wrong answer here would let a request in with the wrong key, or open
 * /v1 to E2B's headers. */
#include <string.h>

#include "daemon/e2b.h"
#include "tap.h"

static int under(const char *t)
{
	return e2b_path(t, strlen(t));
}

static void test_paths_under_the_prefix(void)
{
	CHECK(under("/e2b"));
	CHECK(under("/e2b/"));
	CHECK(under("/e2b/v2/sandboxes"));
	CHECK(under("/e2b?x=1"));
	CHECK(under("/e2b/process.Process/Start"));
}

static void test_paths_not_under_it(void)
{
	CHECK(!under("/e2bx"));
	CHECK(!under("/e2b2/sandboxes"));
	CHECK(!under("/e2"));
	CHECK(!under(""));
	CHECK(!under("/v1/sandboxes"));
	CHECK(!under("/v1/e2b/sandboxes"));
	CHECK(!under("/E2B/sandboxes")); /* paths are case-sensitive */
	CHECK(!under("e2b/sandboxes"));
	CHECK(!e2b_path(NULL, 0));
	/* Only len bytes count: a target not NUL-terminated after them. */
	CHECK(!e2b_path("/e2b/sandboxes", 3));
	CHECK(e2b_path("/e2bXYZ", 4));
}

/* The request's credentials: X-API-KEY, X-Access-Token, E2b-Sandbox-Id
 * (NULL: absent) and its target. */
static int keys_ok(const char *tok, const char *api_key, const char *access, const char *sandbox,
		   const char *target)
{
	struct e2b_keys k = { api_key, api_key ? strlen(api_key) : 0, access,
			      access ? strlen(access) : 0, sandbox, sandbox ? strlen(sandbox) : 0,
			      target, strlen(target), NULL, 0 };
	int ok = e2b_key_ok(tok, &k);
	/* E2B-Traffic-Access-Token in place of X-Access-Token: the same answer. */
	struct e2b_keys t = k;
	t.access_token = NULL;
	t.access_token_len = 0;
	t.traffic_token = access;
	t.traffic_token_len = k.access_token_len;
	CHECK_EQ_INT(e2b_key_ok(tok, &t), ok);
	return ok;
}

static const char *TOK = "s3cret-token-0123456789";
static const char *LIST = "/e2b/v2/sandboxes";
static const char *ENVD = "/e2b/process.Process/Start";

static void test_the_token_in_either_header(void)
{
	CHECK(keys_ok(TOK, TOK, NULL, NULL, LIST));
	CHECK(keys_ok(TOK, NULL, TOK, NULL, LIST));
	CHECK(keys_ok(TOK, "wrong", TOK, NULL, LIST)); /* either header may carry it */
	CHECK(keys_ok(TOK, TOK, "wrong", NULL, ENVD));
	CHECK(!keys_ok(TOK, NULL, NULL, NULL, LIST));
	CHECK(!keys_ok(TOK, "wrong", "wrong", NULL, LIST));
	CHECK(!keys_ok(TOK, "s3cret-token-012345678", NULL, NULL, LIST));   /* a prefix */
	CHECK(!keys_ok(TOK, "s3cret-token-01234567890", NULL, NULL, LIST)); /* longer */
	CHECK(!keys_ok(TOK, "", "", NULL, LIST));
	/* Only the given length counts. */
	struct e2b_keys k = { "s3cret-token-0123456789-and-more", strlen(TOK), NULL, 0, NULL, 0,
			      LIST, strlen(LIST), NULL, 0 };
	CHECK(e2b_key_ok(TOK, &k));
	/* No token configured: nothing matches, not even an empty header. */
	CHECK(!keys_ok(NULL, "", "", NULL, LIST));
	CHECK(!keys_ok("", "", "", NULL, LIST));
}

static void test_access_token_is_per_sandbox(void)
{
	char a[E2B_ACCESS_TOKEN_LEN + 1], b[E2B_ACCESS_TOKEN_LEN + 1], c[E2B_ACCESS_TOKEN_LEN + 1];
	e2b_access_token(TOK, "sb-aaa", 6, a);
	e2b_access_token(TOK, "sb-bbb", 6, b);
	e2b_access_token("another-token-0123456789", "sb-aaa", 6, c);
	CHECK_EQ_INT(strlen(a), E2B_ACCESS_TOKEN_LEN);
	CHECK(strncmp(a, "sbat_", 5) == 0);
	CHECK(strcmp(a, b) != 0);
	CHECK(strcmp(a, c) != 0);
	/* Good inside its own sandbox only. */
	CHECK(keys_ok(TOK, NULL, a, "sb-aaa", ENVD));
	CHECK(keys_ok(TOK, NULL, a, "sb-aaa", "/e2b/files?path=/x"));
	CHECK(!keys_ok(TOK, NULL, a, "sb-bbb", ENVD));
	CHECK(!keys_ok(TOK, NULL, a, NULL, ENVD));
	CHECK(!keys_ok(TOK, NULL, a, "", ENVD));
	CHECK(!keys_ok(TOK, NULL, c, "sb-aaa", ENVD));
	/* Never for the control plane, even naming its sandbox; never as X-API-KEY. */
	CHECK(!keys_ok(TOK, NULL, a, "sb-aaa", "/e2b/sandboxes/sb-aaa"));
	CHECK(!keys_ok(TOK, NULL, a, "sb-aaa", "/e2b/v2/sandboxes"));
	CHECK(!keys_ok(TOK, NULL, a, "sb-aaa", "/e2b/sandboxes?x"));
	CHECK(!keys_ok(TOK, NULL, a, "sb-aaa", "/e2b/templates"));
	CHECK(!keys_ok(TOK, NULL, a, "sb-aaa", "/e2b"));
	CHECK(!keys_ok(TOK, a, NULL, "sb-aaa", ENVD));
}

static void test_control_paths(void)
{
	CHECK(e2b_control_path("/e2b", 4));
	CHECK(e2b_control_path("/e2b/", 5));
	CHECK(e2b_control_path("/e2b?a", 6));
	CHECK(e2b_control_path("/e2b/sandboxes", 14));
	CHECK(e2b_control_path("/e2b/v2/sandboxes/x/connect", 27));
	CHECK(e2b_control_path("/e2b/templates?x=1", 18));
	CHECK(!e2b_control_path("/e2b/files", 10));
	CHECK(!e2b_control_path("/e2b/filesystem.Filesystem/Stat", 31));
	CHECK(!e2b_control_path("/e2b/sandboxesx", 15));
	CHECK(!e2b_control_path("/v1/sandboxes", 13)); /* not under /e2b at all */
}

int main(void)
{
	TAP_RUN(test_paths_under_the_prefix);
	TAP_RUN(test_paths_not_under_it);
	TAP_RUN(test_the_token_in_either_header);
	TAP_RUN(test_access_token_is_per_sandbox);
	TAP_RUN(test_control_paths);
	return tap_done();
}
