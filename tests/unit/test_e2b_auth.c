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

static void test_key_headers(void)
{
	const char *tok = "s3cret-token-0123456789";
	size_t n = strlen(tok);
	CHECK(e2b_key_ok(tok, tok, n, NULL, 0));
	CHECK(e2b_key_ok(tok, NULL, 0, tok, n));
	CHECK(e2b_key_ok(tok, "wrong", 5, tok, n)); /* either header may carry it */
	CHECK(e2b_key_ok(tok, tok, n, "wrong", 5));
	CHECK(!e2b_key_ok(tok, NULL, 0, NULL, 0));
	CHECK(!e2b_key_ok(tok, "wrong", 5, "wrong", 5));
	CHECK(!e2b_key_ok(tok, tok, n - 1, NULL, 0));      /* a prefix */
	CHECK(!e2b_key_ok(tok, "s3cret-token-01234567890", n + 1, NULL, 0)); /* longer */
	CHECK(!e2b_key_ok(tok, "", 0, "", 0));
	/* Only len bytes count. */
	CHECK(e2b_key_ok(tok, "s3cret-token-0123456789-and-more", n, NULL, 0));
	/* No token configured: nothing matches, not even an empty header. */
	CHECK(!e2b_key_ok(NULL, "", 0, "", 0));
	CHECK(!e2b_key_ok("", "", 0, "", 0));
}

int main(void)
{
	TAP_RUN(test_paths_under_the_prefix);
	TAP_RUN(test_paths_not_under_it);
	TAP_RUN(test_key_headers);
	return tap_done();
}
