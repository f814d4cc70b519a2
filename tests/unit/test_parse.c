/* sandlot__parse_size / _duration / _cpus (include/sandlot.h). */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "common/error.h"
#include "common/parse.h"
#include "common/util.h"
#include "tap.h"

#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)
#define TiB ((uint64_t)1 << 40)

/* ---- helpers: one line per case, with the input in the failure output ---- */

static void size_ok(const char *s, int allow_zero, uint64_t want)
{
	sandlot_error_t *err = NULL;
	uint64_t v = 12345;
	int r = sandlot__parse_size(s, allow_zero, &v, &err);
	if (r != 0 || v != want) {
		printf("#   size \"%s\": r=%d v=%llu want %llu (%s)\n", s, r,
		       (unsigned long long)v, (unsigned long long)want,
		       err ? sandlot_error_message(err) : "no error");
		tap_case_failed = 1;
	}
	CHECK(err == NULL);
	sandlot_error_free(err);
}

/* Expect failure with status and a message containing `want` (if not NULL);
 * the output must be left untouched. */
static void size_bad(const char *s, int allow_zero, int status, const char *want)
{
	sandlot_error_t *err = NULL;
	uint64_t v = 12345;
	int r = sandlot__parse_size(s, allow_zero, &v, &err);
	if (r != -1 || !err || sandlot_error_status(err) != status || v != 12345 ||
	    (want && !strstr(sandlot_error_message(err), want))) {
		printf("#   size \"%s\" should fail (status %d, \"%s\"): r=%d v=%llu status=%d "
		       "msg=\"%s\"\n",
		       s ? s : "(null)", status, want ? want : "", r, (unsigned long long)v,
		       sandlot_error_status(err), err ? sandlot_error_message(err) : "");
		tap_case_failed = 1;
	}
	sandlot_error_free(err);
}

static void dur_ok(const char *s, uint64_t want)
{
	sandlot_error_t *err = NULL;
	uint64_t v = 12345;
	int r = sandlot__parse_duration(s, &v, &err);
	if (r != 0 || v != want) {
		printf("#   duration \"%s\": r=%d v=%llu want %llu (%s)\n", s, r,
		       (unsigned long long)v, (unsigned long long)want,
		       err ? sandlot_error_message(err) : "no error");
		tap_case_failed = 1;
	}
	sandlot_error_free(err);
}

static void dur_bad(const char *s, int status, const char *want)
{
	sandlot_error_t *err = NULL;
	uint64_t v = 12345;
	int r = sandlot__parse_duration(s, &v, &err);
	if (r != -1 || !err || sandlot_error_status(err) != status || v != 12345 ||
	    (want && !strstr(sandlot_error_message(err), want))) {
		printf("#   duration \"%s\" should fail (status %d, \"%s\"): r=%d v=%llu status=%d "
		       "msg=\"%s\"\n",
		       s ? s : "(null)", status, want ? want : "", r, (unsigned long long)v,
		       sandlot_error_status(err), err ? sandlot_error_message(err) : "");
		tap_case_failed = 1;
	}
	sandlot_error_free(err);
}

static void cpus_ok(const char *s, uint32_t want)
{
	sandlot_error_t *err = NULL;
	uint32_t v = 12345;
	int r = sandlot__parse_cpus(s, &v, &err);
	if (r != 0 || v != want) {
		printf("#   cpus \"%s\": r=%d v=%u want %u (%s)\n", s, r, v, want,
		       err ? sandlot_error_message(err) : "no error");
		tap_case_failed = 1;
	}
	sandlot_error_free(err);
}

static void cpus_bad(const char *s, int status, const char *want)
{
	sandlot_error_t *err = NULL;
	uint32_t v = 12345;
	int r = sandlot__parse_cpus(s, &v, &err);
	if (r != -1 || !err || sandlot_error_status(err) != status || v != 12345 ||
	    (want && !strstr(sandlot_error_message(err), want))) {
		printf("#   cpus \"%s\" should fail (status %d, \"%s\"): r=%d v=%u status=%d "
		       "msg=\"%s\"\n",
		       s ? s : "(null)", status, want ? want : "", r, v, sandlot_error_status(err),
		       err ? sandlot_error_message(err) : "");
		tap_case_failed = 1;
	}
	sandlot_error_free(err);
}

static const char *size_msg(const char *s, int allow_zero)
{
	static char buf[512];
	sandlot_error_t *err = NULL;
	uint64_t v;
	buf[0] = '\0';
	if (sandlot__parse_size(s, allow_zero, &v, &err) < 0)
		snprintf(buf, sizeof(buf), "%s", sandlot_error_message(err));
	sandlot_error_free(err);
	return buf;
}

/* ---- sizes ---------------------------------------------------------------- */

static void test_size_good(void)
{
	size_ok("1", 0, 1);
	size_ok("1048576", 0, 1048576);
	size_ok("512", 0, 512);
	size_ok("100B", 0, 100);
	size_ok("100b", 0, 100);
	size_ok("1K", 0, KiB);
	size_ok("1k", 0, KiB);
	size_ok("1KB", 0, KiB);
	size_ok("1KiB", 0, KiB);
	size_ok("1kib", 0, KiB);
	size_ok("512M", 0, 512 * MiB);
	size_ok("512m", 0, 512 * MiB);
	size_ok("512MB", 0, 512 * MiB);
	size_ok("512mb", 0, 512 * MiB);
	size_ok("512MiB", 0, 512 * MiB);
	size_ok("512Mi", 0, 512 * MiB);
	size_ok("1G", 0, GiB);
	size_ok("1.5G", 0, GiB + GiB / 2);
	size_ok("1.5GiB", 0, 1610612736);
	size_ok("0.5K", 0, 512);
	size_ok(".5K", 0, 512);
	size_ok("1.3K", 0, 1331); /* 1331.2 truncated to whole bytes */
	size_ok("2T", 0, 2 * TiB);
	size_ok("007M", 0, 7 * MiB);
	size_ok("1.0", 0, 1);
	size_ok("1.250000000K", 0, 1280); /* trailing zeros beyond 6 places are fine */
	size_ok("0.000001T", 0, 1099511);
	size_ok("0", 1, 0);
	size_ok("0M", 1, 0);
	size_ok("18446744073709551615", 0, UINT64_MAX);
	size_ok("16777215T", 0, 16777215 * TiB);
	size_ok("16777215.999999T", 0, 16777215 * TiB + 1099510528264ull);
}

static void test_size_bad(void)
{
	size_bad(NULL, 0, EINVAL, "none given");
	size_bad("", 0, EINVAL, "invalid size \"\"");
	size_bad("12Q", 0, EINVAL, "invalid size \"12Q\": expected a number with an optional unit");
	size_bad("-1", 0, EINVAL, "must not be negative");
	size_bad("-1G", 0, EINVAL, "must not be negative");
	size_bad("+1", 0, EINVAL, "expected a number");
	size_bad("0", 0, EINVAL, "invalid size \"0\": must be greater than zero");
	size_bad("0K", 0, EINVAL, "greater than zero");
	size_bad("0.0000001K", 0, EINVAL, "decimal places");
	size_bad(" 1G", 0, EINVAL, "expected a number");
	size_bad("1G ", 0, EINVAL, "expected a number");
	size_bad("1 G", 0, EINVAL, "expected a number");
	size_bad("1G\n", 0, EINVAL, "\"1G\\x0a\"");
	size_bad("G", 0, EINVAL, "expected a number");
	size_bad("1GG", 0, EINVAL, "expected a number");
	size_bad("1iB", 0, EINVAL, "expected a number");
	size_bad("1BB", 0, EINVAL, "expected a number");
	size_bad("1KBi", 0, EINVAL, "expected a number");
	size_bad("1P", 0, EINVAL, "expected a number");
	size_bad("1.", 0, EINVAL, "expected a number");
	size_bad(".", 0, EINVAL, "expected a number");
	size_bad("1..5G", 0, EINVAL, "expected a number");
	size_bad("1.5.G", 0, EINVAL, "expected a number");
	size_bad("0x10", 0, EINVAL, "expected a number");
	size_bad("1e3", 0, EINVAL, "expected a number");
	size_bad("1,5G", 0, EINVAL, "expected a number");
	size_bad("1.5", 0, EINVAL, "whole number");
	size_bad("1.1234567G", 0, EINVAL, "at most 6 decimal places");
	size_bad("18446744073709551616", 0, ERANGE, "too large");
	size_bad("99999999999999999999999", 0, ERANGE, "too large");
	size_bad("16777216T", 0, ERANGE, "too large");
	size_bad("17179869184G", 0, ERANGE, "too large");
	size_bad("16777215.9999999T", 0, EINVAL, "decimal places");
}

static void test_size_messages(void)
{
	/* The exact wording users see. */
	CHECK_STR(size_msg("12Q", 0),
		  "invalid size \"12Q\": expected a number with an optional unit K, M, G or T "
		  "(e.g. 512M)");
	CHECK_STR(size_msg("0", 0), "invalid size \"0\": must be greater than zero");
	CHECK_STR(size_msg("-5M", 0), "invalid size \"-5M\": must not be negative");
	CHECK_STR(size_msg("20000000T", 0),
		  "size \"20000000T\" is too large: at most 18446744073709551615 bytes (16 EiB - 1)");
	/* Control characters and quotes are escaped; long input is cut. */
	CHECK_STR(size_msg("1\"\x01\\", 0),
		  "invalid size \"1\\\"\\x01\\\\\": expected a number with an optional unit K, M, "
		  "G or T (e.g. 512M)");
	char longs[200];
	memset(longs, 'x', sizeof(longs) - 1);
	longs[sizeof(longs) - 1] = '\0';
	const char *m = size_msg(longs, 0);
	CHECK(strstr(m, "xxx...\"") != NULL);
	CHECK(strlen(m) < 200);
	/* Every message is one line. */
	CHECK(strchr(size_msg("1\n2", 0), '\n') == NULL);
}

/* ---- durations ------------------------------------------------------------ */

static void test_duration_good(void)
{
	dur_ok("500ms", 500);
	dur_ok("30s", 30000);
	dur_ok("2m", 120000);
	dur_ok("1h", 3600000);
	dur_ok("1m30s", 90000);
	dur_ok("1h2m3s4ms", 3723004);
	dur_ok("1h30m", 5400000);
	dur_ok("30", 30000);
	dur_ok("0", 0);
	dur_ok("0s", 0);
	dur_ok("0ms", 0);
	dur_ok("1.5s", 1500);
	dur_ok("1.5", 1500);
	dur_ok(".5s", 500);
	dur_ok("0.5h", 1800000);
	dur_ok("1.5ms", 1); /* sub-millisecond parts are dropped */
	dur_ok("0.0001s", 0);
	dur_ok("1S", 1000);
	dur_ok("1MS", 1);
	dur_ok("1H", 3600000);
	dur_ok("90m", 5400000);
	dur_ok("120s", 120000);
	dur_ok("18446744073709551615ms", UINT64_MAX);
}

static void test_duration_bad(void)
{
	dur_bad(NULL, EINVAL, "none given");
	dur_bad("", EINVAL, "invalid duration \"\"");
	dur_bad("abc", EINVAL, "invalid duration \"abc\": expected a number with a unit ms, s, m or h");
	dur_bad("-1s", EINVAL, "must not be negative");
	dur_bad("-1", EINVAL, "must not be negative");
	dur_bad("1x", EINVAL, "expected a number");
	dur_bad("1d", EINVAL, "expected a number");
	dur_bad("1 s", EINVAL, "expected a number");
	dur_bad(" 1s", EINVAL, "expected a number");
	dur_bad("1s ", EINVAL, "expected a number");
	dur_bad("s", EINVAL, "expected a number");
	dur_bad("1m30", EINVAL, "expected a number"); /* a bare number only on its own */
	dur_bad("1s1m", EINVAL, "largest to smallest");
	dur_bad("1s1s", EINVAL, "largest to smallest");
	dur_bad("1.s", EINVAL, "expected a number");
	dur_bad("1mss", EINVAL, "expected a number");
	dur_bad("1.0000000001s", EINVAL, "decimal places");
	dur_bad("18446744073709551616ms", ERANGE, "too long");
	dur_bad("18446744073709551615s", ERANGE, "too long");
	dur_bad("5124095576030431h", ERANGE, "too long");
	dur_bad("18446744073709551615ms1ms", EINVAL, "largest to smallest");
	dur_bad("18446744073709551s616ms", ERANGE, "too long");
}

/* ---- CPUs ----------------------------------------------------------------- */

static void test_cpus_good(void)
{
	cpus_ok("2", 2000);
	cpus_ok("0.5", 500);
	cpus_ok("1.25", 1250);
	cpus_ok("1.250", 1250);
	cpus_ok("1.2500", 1250); /* extra zeros add no precision */
	cpus_ok(".5", 500);
	cpus_ok("0.001", 1);
	cpus_ok("1024", 1024000);
	cpus_ok("1024.000", 1024000);
	cpus_ok("01", 1000);
}

static void test_cpus_bad(void)
{
	cpus_bad(NULL, EINVAL, "none given");
	cpus_bad("", EINVAL, "invalid CPU count \"\"");
	cpus_bad("0", EINVAL, "invalid CPU count \"0\": must be greater than zero");
	cpus_bad("0.000", EINVAL, "greater than zero");
	cpus_bad("0.0001", EINVAL, "at most 3 decimal places");
	cpus_bad("1.2345", EINVAL, "invalid CPU count \"1.2345\": at most 3 decimal places");
	cpus_bad("-1", EINVAL, "must not be negative");
	cpus_bad("-0.5", EINVAL, "must not be negative");
	cpus_bad("1024.001", ERANGE, "too large: at most 1024");
	cpus_bad("1025", ERANGE, "CPU count \"1025\" is too large: at most 1024");
	cpus_bad("99999999999999999999999", ERANGE, "too large");
	cpus_bad("2c", EINVAL,
		 "invalid CPU count \"2c\": expected a number of CPUs such as 2, 0.5 or 1.25");
	cpus_bad("1.", EINVAL, "expected a number");
	cpus_bad("one", EINVAL, "expected a number");
	cpus_bad(" 1", EINVAL, "expected a number");
	cpus_bad("1 ", EINVAL, "expected a number");
	cpus_bad("50%", EINVAL, "expected a number");
	cpus_bad("1e2", EINVAL, "expected a number");
}

/* Entry names from the sandbox (sandlot_list, the CLI's downloads). */
static void test_entry_names(void)
{
	static const char *const good[] = { "a", "...", ".hidden", "a b", "\xff\xfe", "..a", "a.." };
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		CHECK(sandlot__entry_name_problem(good[i], strlen(good[i])) == NULL);
	CHECK(sandlot__entry_name_problem("", 0) != NULL);
	CHECK(sandlot__entry_name_problem(".", 1) != NULL);
	CHECK(sandlot__entry_name_problem("..", 2) != NULL);
	CHECK(sandlot__entry_name_problem("/", 1) != NULL);
	CHECK(sandlot__entry_name_problem("a/b", 3) != NULL);
	CHECK(sandlot__entry_name_problem("../x", 4) != NULL);
	CHECK(sandlot__entry_name_problem("a\0b", 3) != NULL);
	CHECK(sandlot__entry_name_problem("..\0", 3) != NULL);
	/* Only len bytes count: "..x" cut to two is "..". */
	CHECK(sandlot__entry_name_problem("..x", 2) != NULL);
	CHECK(sandlot__entry_name_problem("..x", 3) == NULL);
}

int main(void)
{
	TAP_RUN(test_size_good);
	TAP_RUN(test_size_bad);
	TAP_RUN(test_size_messages);
	TAP_RUN(test_duration_good);
	TAP_RUN(test_duration_bad);
	TAP_RUN(test_cpus_good);
	TAP_RUN(test_cpus_bad);
	TAP_RUN(test_entry_names);
	return tap_done();
}
