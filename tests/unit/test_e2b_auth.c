/* The E2B-compatible API's part of authentication (src/daemon/e2b_auth.c):
 * which request targets are under /e2b, and the check of E2B's key headers.
 * The front door and the HTTP layer call these on every TCP request, so
 * a wrong answer here would let a request in with the wrong key, or open
 * /v1 to E2B's headers. */
#include <stdio.h>
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

/* e2b_host_parse(host, "localhost"): -1 not a sandbox host, else the port
 * (0 when bad: *bad set) and the id into id. */
static int host_port(const char *host, const char *domain, char id[64], const char **bad)
{
	struct e2b_host h;
	int r = e2b_host_parse(host, strlen(host), domain, &h);
	strcpy(id, h.id);
	*bad = h.bad;
	return r ? (int)h.port : -1;
}

static void test_sandbox_hosts(void)
{
	char id[64];
	const char *bad;
	const char *sb = "sb-abcdefghijklmnopqrstuvwxyz";
	char host[160];
	snprintf(host, sizeof(host), "8000-%s.localhost:8765", sb);
	CHECK_EQ_INT(host_port(host, "localhost", id, &bad), 8000);
	CHECK(!bad && strcmp(id, sb) == 0);
	/* No port, a final dot, any case: the same. */
	CHECK_EQ_INT(host_port("3000-SB-ABC.LocalHost.", "localhost", id, &bad), 3000);
	CHECK(!bad && strcmp(id, "sb-abc") == 0);
	CHECK_EQ_INT(host_port("1-x.sandboxes.example.com", "sandboxes.example.com", id, &bad), 1);
	CHECK_EQ_INT(host_port("65535-x.localhost", "localhost", id, &bad), 65535);
	CHECK_EQ_INT(host_port("08000-x.localhost", "localhost", id, &bad), 8000);
	/* Not sandbox hosts: the API's. */
	CHECK_EQ_INT(host_port("localhost:8765", "localhost", id, &bad), -1);
	CHECK_EQ_INT(host_port("localhost", "localhost", id, &bad), -1);
	CHECK_EQ_INT(host_port(".localhost", "localhost", id, &bad), -1);
	CHECK_EQ_INT(host_port("127.0.0.1:8765", "localhost", id, &bad), -1);
	CHECK_EQ_INT(host_port("8000-x.notlocalhost", "localhost", id, &bad), -1);
	CHECK_EQ_INT(host_port("8000-x.localhost.example", "localhost", id, &bad), -1);
	CHECK_EQ_INT(host_port("[::1]:8765", "localhost", id, &bad), -1);
	CHECK_EQ_INT(host_port("8000-x.localhost", "", id, &bad), -1);
	CHECK_EQ_INT(host_port("8000-x.localhost", NULL, id, &bad), -1);
	/* Sandbox hosts with something wrong: said what. */
	const char *bad_ports[] = { "0-x.localhost", "65536-x.localhost", "abc-x.localhost",
				    "-x.localhost", "99999999999999999999-x.localhost",
				    "8o00-x.localhost" };
	for (size_t i = 0; i < sizeof(bad_ports) / sizeof(bad_ports[0]); i++) {
		CHECK_EQ_INT(host_port(bad_ports[i], "localhost", id, &bad), 0);
		CHECK(bad && strstr(bad, "1 to 65535"));
		CHECK(id[0] == '\0');
	}
	CHECK_EQ_INT(host_port("8000.localhost", "localhost", id, &bad), 0);
	CHECK(bad && strstr(bad, "PORT-SANDBOXID"));
	CHECK_EQ_INT(host_port("8000-a.b.localhost", "localhost", id, &bad), 0);
	CHECK_EQ_INT(host_port("8000-sb_x.localhost", "localhost", id, &bad), 0);
	CHECK(bad && strstr(bad, "only letters, digits and '-'") && id[0] == '\0');
	CHECK_EQ_INT(host_port("8000-.localhost", "localhost", id, &bad), 0);
	CHECK(bad && strstr(bad, "no sandbox id"));
	/* Only len bytes count. */
	struct e2b_host h;
	CHECK_EQ_INT(e2b_host_parse("8000-x.localhostZZZ", 16, "localhost", &h), 1);
	CHECK_EQ_INT((int)h.port, 8000);
}

static int host_key(const char *auth, const char *api_key, const char *access, const char *traffic,
		    const char *id)
{
	struct e2b_keys k = { api_key, api_key ? strlen(api_key) : 0, access,
			      access ? strlen(access) : 0, NULL, 0, "/", 1, traffic,
			      traffic ? strlen(traffic) : 0 };
	return e2b_host_key_ok(TOK, auth, auth ? strlen(auth) : 0, &k, id);
}

static void test_sandbox_host_keys(void)
{
	char a[E2B_ACCESS_TOKEN_LEN + 1], b[E2B_ACCESS_TOKEN_LEN + 1], bearer[64];
	e2b_access_token(TOK, "sb-aaa", 6, a);
	e2b_access_token(TOK, "sb-bbb", 6, b);
	snprintf(bearer, sizeof(bearer), "Bearer %s", TOK);
	/* The daemon's token in any header. */
	CHECK(host_key(bearer, NULL, NULL, NULL, "sb-aaa"));
	CHECK(host_key(NULL, TOK, NULL, NULL, "sb-aaa"));
	CHECK(host_key(NULL, NULL, TOK, NULL, "sb-aaa"));
	CHECK(host_key(NULL, NULL, NULL, TOK, "sb-aaa"));
	CHECK(host_key(bearer, NULL, NULL, NULL, "")); /* even for a bad host: it is then answered */
	/* The sandbox's own token, in E2B's token headers only. */
	CHECK(host_key(NULL, NULL, a, NULL, "sb-aaa"));
	CHECK(host_key(NULL, NULL, NULL, a, "sb-aaa"));
	CHECK(!host_key(NULL, a, NULL, NULL, "sb-aaa"));
	char ba[96];
	snprintf(ba, sizeof(ba), "Bearer %s", a);
	CHECK(!host_key(ba, NULL, NULL, NULL, "sb-aaa"));
	/* Not another sandbox's, not for no sandbox, nothing else. */
	CHECK(!host_key(NULL, NULL, b, b, "sb-aaa"));
	CHECK(!host_key(NULL, NULL, a, a, ""));
	CHECK(!host_key(NULL, NULL, a, a, NULL));
	CHECK(!host_key(NULL, NULL, NULL, NULL, "sb-aaa"));
	CHECK(!host_key(TOK, NULL, NULL, NULL, "sb-aaa")); /* Authorization wants "Bearer " */
	CHECK(!host_key("Basic dXNlcjo=", "x", "y", "z", "sb-aaa"));
	/* No token configured: nothing opens a host. */
	struct e2b_keys k = { "", 0, "", 0, NULL, 0, "/", 1, "", 0 };
	CHECK(!e2b_host_key_ok(NULL, "", 0, &k, "sb-aaa"));
	CHECK(!e2b_host_key_ok("", "Bearer ", 7, &k, "sb-aaa"));
}

int main(void)
{
	TAP_RUN(test_paths_under_the_prefix);
	TAP_RUN(test_paths_not_under_it);
	TAP_RUN(test_the_token_in_either_header);
	TAP_RUN(test_access_token_is_per_sandbox);
	TAP_RUN(test_control_paths);
	TAP_RUN(test_sandbox_hosts);
	TAP_RUN(test_sandbox_host_keys);
	return tap_done();
}
