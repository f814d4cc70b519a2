/* The error contract of src/common/error.c (see error.h). */
#include <errno.h>
#include <string.h>

#include "common/error.h"
#include "common/lazylib.h"
#include "tap.h"

static int fails_with(sandlot_error_t **err)
{
	return sandlot__error(err, ENOENT, "open %s", "/nope");
}

static void test_status_and_message(void)
{
	sandlot_error_t *err = NULL;
	CHECK_EQ_INT(fails_with(&err), -1);
	CHECK(err != NULL);
	CHECK_EQ_INT(sandlot_error_status(err), ENOENT);
	CHECK_STR(sandlot_error_message(err), "open /nope");
	sandlot_error_free(err);
}

static void test_zero_status_becomes_eio(void)
{
	sandlot_error_t *err = NULL;
	CHECK_EQ_INT(sandlot__error(&err, 0, "broken"), -1);
	CHECK_EQ_INT(sandlot_error_status(err), EIO);
	sandlot_error_free(err);

	err = NULL;
	CHECK_EQ_INT(sandlot__error(&err, -5, "negative"), -1);
	CHECK_EQ_INT(sandlot_error_status(err), EIO);
	sandlot_error_free(err);
}

static void test_replace_existing(void)
{
	sandlot_error_t *err = NULL;
	sandlot__error(&err, ENOENT, "first");
	sandlot__error(&err, EACCES, "second"); /* the first is freed (ASan checks) */
	CHECK_EQ_INT(sandlot_error_status(err), EACCES);
	CHECK_STR(sandlot_error_message(err), "second");
	sandlot_error_free(err);
}

static void test_wrap_adds_context(void)
{
	sandlot_error_t *err = NULL;
	sandlot__error_errno(&err, ENODEV, "mount workspace");
	CHECK_EQ_INT(sandlot__error_wrap(&err, "create sandbox %d", 7), -1);
	CHECK_EQ_INT(sandlot_error_status(err), ENODEV);
	CHECK_STR(sandlot_error_message(err), "create sandbox 7: mount workspace: No such device");
	sandlot__error_wrap(&err, "outer");
	CHECK_STR(sandlot_error_message(err),
		  "outer: create sandbox 7: mount workspace: No such device");
	sandlot_error_free(err);
}

static void test_wrap_tolerates_null(void)
{
	CHECK_EQ_INT(sandlot__error_wrap(NULL, "ctx"), -1);
	sandlot_error_t *err = NULL;
	CHECK_EQ_INT(sandlot__error_wrap(&err, "ctx"), -1);
	CHECK(err == NULL);
}

static void test_null_err_discards(void)
{
	/* The caller does not care: nothing is stored, nothing leaks (ASan). */
	CHECK_EQ_INT(sandlot__error(NULL, EINVAL, "ignored %s", "x"), -1);
	CHECK_EQ_INT(sandlot__error_errno(NULL, EINVAL, "ignored"), -1);
}

static void test_errno_variant(void)
{
	sandlot_error_t *err = NULL;
	CHECK_EQ_INT(sandlot__error_errno(&err, EACCES, "open %s", "/etc/shadow"), -1);
	CHECK_EQ_INT(sandlot_error_status(err), EACCES);
	char want[256];
	snprintf(want, sizeof(want), "open /etc/shadow: %s", strerror(EACCES));
	CHECK_STR(sandlot_error_message(err), want);
	sandlot_error_free(err);
}

static void test_accessors_on_null(void)
{
	CHECK_EQ_INT(sandlot_error_status(NULL), 0);
	CHECK_STR(sandlot_error_message(NULL), "");
	sandlot_error_free(NULL);
}

static void test_long_message(void)
{
	/* Messages are not truncated to any fixed buffer. */
	char big[5000];
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	sandlot_error_t *err = NULL;
	sandlot__error(&err, E2BIG, "%s", big);
	sandlot__error_wrap(&err, "ctx");
	CHECK_EQ_INT(strlen(sandlot_error_message(err)), strlen(big) + 5);
	CHECK(strncmp(sandlot_error_message(err), "ctx: aaa", 8) == 0);
	sandlot_error_free(err);
}

/* lazylib.h: a library loaded on first use, its symbols filled all at
 * once; a missing library or symbol is an error naming it and what needed
 * it, the same on every call, with no slot filled. */
static size_t (*lz_strlen)(const char *);
static const struct sandlot_lazysym libc_syms[] = { { "strlen", (void **)&lz_strlen } };
static struct sandlot_lazylib libc_lib = SANDLOT_LAZYLIB("libc.so.6", "count", libc_syms);

static void *lz_slot;
static const struct sandlot_lazysym bad_syms[] = { { "strlen", &lz_slot },
						   { "sandlot_no_such_symbol", &lz_slot } };
static struct sandlot_lazylib badsym_lib = SANDLOT_LAZYLIB("libc.so.6", "do it", bad_syms);
static struct sandlot_lazylib nolib_lib =
	SANDLOT_LAZYLIB("libsandlot-no-such-library.so.9", "load the rules", bad_syms);

static void test_lazylib_loads_once(void)
{
	sandlot_error_t *err = NULL;
	CHECK_EQ_INT(sandlot__lazylib_load(&libc_lib, &err), 0);
	CHECK(err == NULL);
	CHECK(lz_strlen != NULL);
	CHECK_EQ_INT(lz_strlen("four"), 4);
	size_t (*first)(const char *) = lz_strlen;
	CHECK_EQ_INT(sandlot__lazylib_load(&libc_lib, &err), 0);
	CHECK(lz_strlen == first);
}

static void test_lazylib_missing_library(void)
{
	for (int i = 0; i < 2; i++) {
		sandlot_error_t *err = NULL;
		CHECK_EQ_INT(sandlot__lazylib_load(&nolib_lib, &err), -1);
		CHECK_EQ_INT(sandlot_error_status(err), ENOTSUP);
		const char *m = sandlot_error_message(err);
		CHECK(strncmp(m, "load the rules: needs libsandlot-no-such-library.so.9", 53) == 0);
		sandlot_error_free(err);
	}
	CHECK(lz_slot == NULL);
}

static void test_lazylib_missing_symbol(void)
{
	sandlot_error_t *err = NULL;
	CHECK_EQ_INT(sandlot__lazylib_load(&badsym_lib, &err), -1);
	CHECK(strstr(sandlot_error_message(err), "has no sandlot_no_such_symbol") != NULL);
	sandlot_error_free(err);
	/* strlen was found, but nothing is filled unless everything is. */
	CHECK(lz_slot == NULL);
}

int main(void)
{
	TAP_RUN(test_status_and_message);
	TAP_RUN(test_zero_status_becomes_eio);
	TAP_RUN(test_replace_existing);
	TAP_RUN(test_wrap_adds_context);
	TAP_RUN(test_wrap_tolerates_null);
	TAP_RUN(test_null_err_discards);
	TAP_RUN(test_errno_variant);
	TAP_RUN(test_accessors_on_null);
	TAP_RUN(test_long_message);
	TAP_RUN(test_lazylib_loads_once);
	TAP_RUN(test_lazylib_missing_library);
	TAP_RUN(test_lazylib_missing_symbol);
	return tap_done();
}
