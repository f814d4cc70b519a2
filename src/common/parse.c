/* Parsers for the human-written quantities the CLI and the daemon accept:
 * sizes ("512M"), durations ("1m30s") and CPU counts ("1.5").
 *
 * All three are strict: no whitespace, no sign, no junk after the number,
 * and every failure names the input and what was expected, in one line that
 * is safe to print (control characters in the input are escaped and very long
 * inputs are cut).  They do exact integer arithmetic — no floating point — so
 * "1.5G" is exactly 1610612736 and overflow is always detected.  On failure
 * the output is left untouched.
 */
#include "common/parse.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "error.h"

/* ---- helpers ------------------------------------------------------------ */

/* Longest part of the input quoted back in a message. */
#define QUOTE_MAX 48

/* Quote untrusted input for an error message: printable ASCII is kept,
 * everything else becomes \xNN, `"` and `\` are escaped, and input longer
 * than QUOTE_MAX characters is cut with "...".  buf must hold QUOTE_BUF. */
#define QUOTE_BUF (QUOTE_MAX * 4 + 8)

static const char *quote(const char *s, char buf[QUOTE_BUF])
{
	size_t o = 0, i;
	buf[o++] = '"';
	for (i = 0; s[i] && i < QUOTE_MAX; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\') {
			buf[o++] = '\\';
			buf[o++] = (char)c;
		} else if (c < 0x20 || c >= 0x7f) {
			o += (size_t)snprintf(buf + o, 5, "\\x%02x", c);
		} else {
			buf[o++] = (char)c;
		}
	}
	if (s[i]) {
		memcpy(buf + o, "...", 3);
		o += 3;
	}
	buf[o++] = '"';
	buf[o] = '\0';
	return buf;
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static char lower(char c)
{
	return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

/* a * b + c with overflow detection.  Returns false on overflow. */
static bool mul_add(uint64_t a, uint64_t b, uint64_t c, uint64_t *out)
{
	uint64_t r;
	if (__builtin_mul_overflow(a, b, &r) || __builtin_add_overflow(r, c, &r))
		return false;
	*out = r;
	return true;
}

/* A decimal number as written: "12", "1.5", ".5".  The fraction keeps at most
 * max_frac digits in frac (scaled so that frac / 10^frac_digits is the
 * fractional part); extra digits only set extra_nonzero if any of them is not
 * a zero, so "1.2500" and "1.25" are the same number. */
struct number {
	uint64_t ip;            /* integer part */
	uint64_t frac;          /* first frac_digits fractional digits */
	unsigned frac_digits;
	bool has_frac;          /* a '.' was present */
	bool extra_nonzero;     /* a non-zero digit beyond max_frac */
	bool overflow;          /* integer part does not fit in 64 bits */
};

/* Scan a number at p.  Returns the position after it, or NULL if p does not
 * start with a well-formed number (digits, optionally followed by '.' and
 * at least one digit; or '.' and at least one digit). */
static const char *scan_number(const char *p, unsigned max_frac, struct number *n)
{
	memset(n, 0, sizeof(*n));
	bool any = false;
	while (is_digit(*p)) {
		if (!mul_add(n->ip, 10, (uint64_t)(*p - '0'), &n->ip))
			n->overflow = true;
		p++;
		any = true;
	}
	if (*p == '.') {
		p++;
		n->has_frac = true;
		if (!is_digit(*p))
			return NULL; /* "5." or "." */
		while (is_digit(*p)) {
			if (n->frac_digits < max_frac) {
				n->frac = n->frac * 10 + (uint64_t)(*p - '0');
				n->frac_digits++;
			} else if (*p != '0') {
				n->extra_nonzero = true;
			}
			p++;
			any = true;
		}
	}
	return any ? p : NULL;
}

static uint64_t pow10u(unsigned k)
{
	uint64_t r = 1;
	while (k--)
		r *= 10;
	return r;
}

/* Value of n times mult, truncated to an integer.  The fractional part is
 * computed exactly as frac * mult / 10^frac_digits; callers bound frac_digits
 * and mult so that the product fits in 64 bits.  False on overflow. */
static bool scale(const struct number *n, uint64_t mult, uint64_t *out)
{
	if (n->overflow)
		return false;
	uint64_t whole;
	if (__builtin_mul_overflow(n->ip, mult, &whole))
		return false;
	uint64_t part = n->frac * mult / pow10u(n->frac_digits);
	return !__builtin_add_overflow(whole, part, out);
}

/* ---- sizes -------------------------------------------------------------- */

/* Fraction digits considered in sizes: 10^6 * 2^40 < 2^64 keeps scale()
 * exact for every unit. */
#define SIZE_MAX_FRAC 6

#define SIZE_EXPECTED "expected a number with an optional unit K, M, G or T (e.g. 512M)"

int sandlot__parse_size(const char *s, int allow_zero, uint64_t *out, sandlot_error_t **err)
{
	char q[QUOTE_BUF];
	if (!s)
		return sandlot__error(err, EINVAL, "invalid size (none given): " SIZE_EXPECTED);
	if (!*s)
		return sandlot__error(err, EINVAL, "invalid size \"\": " SIZE_EXPECTED);
	if (s[0] == '-')
		return sandlot__error(err, EINVAL, "invalid size %s: must not be negative",
				      quote(s, q));

	struct number n;
	const char *p = scan_number(s, SIZE_MAX_FRAC, &n);
	if (!p)
		return sandlot__error(err, EINVAL, "invalid size %s: " SIZE_EXPECTED, quote(s, q));

	/* Unit: [KMGT] [i] [B], or a lone B, case-insensitive. */
	unsigned shift = 0;
	bool unit = false;
	switch (lower(*p)) {
	case 'k': shift = 10; break;
	case 'm': shift = 20; break;
	case 'g': shift = 30; break;
	case 't': shift = 40; break;
	default: break;
	}
	if (shift) {
		unit = true;
		p++;
		if (lower(*p) == 'i')
			p++;
	}
	if (lower(*p) == 'b')
		p++;
	if (*p)
		return sandlot__error(err, EINVAL, "invalid size %s: " SIZE_EXPECTED, quote(s, q));

	if (n.extra_nonzero)
		return sandlot__error(err, EINVAL,
				      "invalid size %s: at most %d decimal places are supported",
				      quote(s, q), SIZE_MAX_FRAC);
	if (!unit && n.frac)
		return sandlot__error(err, EINVAL,
				      "invalid size %s: a byte count must be a whole number "
				      "(use a unit for fractions, e.g. 1.5G)",
				      quote(s, q));

	uint64_t v;
	if (!scale(&n, (uint64_t)1 << shift, &v))
		return sandlot__error(err, ERANGE,
				      "size %s is too large: at most %llu bytes (16 EiB - 1)",
				      quote(s, q), (unsigned long long)UINT64_MAX);
	if (v == 0 && !allow_zero)
		return sandlot__error(err, EINVAL, "invalid size %s: must be greater than zero",
				      quote(s, q));
	*out = v;
	return 0;
}

/* ---- durations ---------------------------------------------------------- */

/* Fraction digits considered in durations: 10^9 * 3600000 < 2^64. */
#define DURATION_MAX_FRAC 9

#define DURATION_EXPECTED \
	"expected a number with a unit ms, s, m or h, or several from largest to " \
	"smallest (e.g. 500ms, 30s, 1m30s); a bare number means seconds"

struct duration_unit {
	const char *name;
	uint64_t ms;
};

/* Longest names first so "ms" is not read as "m" followed by junk. */
static const struct duration_unit duration_units[] = {
	{ "ms", 1 },
	{ "h", 3600000 },
	{ "m", 60000 },
	{ "s", 1000 },
};

int sandlot__parse_duration(const char *s, uint64_t *out_ms, sandlot_error_t **err)
{
	char q[QUOTE_BUF];
	if (!s)
		return sandlot__error(err, EINVAL, "invalid duration (none given): " DURATION_EXPECTED);
	if (!*s)
		return sandlot__error(err, EINVAL, "invalid duration \"\": " DURATION_EXPECTED);
	if (s[0] == '-')
		return sandlot__error(err, EINVAL, "invalid duration %s: must not be negative",
				      quote(s, q));

	uint64_t total = 0;
	uint64_t last_unit = UINT64_MAX; /* units must strictly decrease */
	const char *p = s;
	bool first = true;
	while (*p) {
		struct number n;
		const char *after = scan_number(p, DURATION_MAX_FRAC, &n);
		if (!after)
			return sandlot__error(err, EINVAL, "invalid duration %s: " DURATION_EXPECTED,
					      quote(s, q));
		p = after;

		const struct duration_unit *u = NULL;
		for (size_t i = 0; i < sizeof(duration_units) / sizeof(duration_units[0]); i++) {
			size_t len = strlen(duration_units[i].name);
			size_t j;
			for (j = 0; j < len && lower(p[j]) == duration_units[i].name[j]; j++)
				;
			if (j == len) {
				u = &duration_units[i];
				p += len;
				break;
			}
		}
		uint64_t mult;
		if (u) {
			mult = u->ms;
		} else if (first && !*p) {
			mult = 1000; /* a bare number: seconds */
		} else {
			return sandlot__error(err, EINVAL, "invalid duration %s: " DURATION_EXPECTED,
					      quote(s, q));
		}
		if (mult >= last_unit)
			return sandlot__error(err, EINVAL,
					      "invalid duration %s: units must go from largest to "
					      "smallest, each at most once (e.g. 1h30m)",
					      quote(s, q));
		last_unit = mult;
		first = false;

		if (n.extra_nonzero)
			return sandlot__error(err, EINVAL,
					      "invalid duration %s: at most %d decimal places are "
					      "supported",
					      quote(s, q), DURATION_MAX_FRAC);
		uint64_t v;
		if (!scale(&n, mult, &v) || __builtin_add_overflow(total, v, &total))
			return sandlot__error(err, ERANGE,
					      "duration %s is too long: at most %llu milliseconds",
					      quote(s, q), (unsigned long long)UINT64_MAX);
	}
	*out_ms = total;
	return 0;
}

/* ---- CPU counts --------------------------------------------------------- */

#define CPUS_MAX 1024

#define CPUS_EXPECTED "expected a number of CPUs such as 2, 0.5 or 1.25"

int sandlot__parse_cpus(const char *s, uint32_t *out_milli, sandlot_error_t **err)
{
	char q[QUOTE_BUF];
	if (!s)
		return sandlot__error(err, EINVAL, "invalid CPU count (none given): " CPUS_EXPECTED);
	if (!*s)
		return sandlot__error(err, EINVAL, "invalid CPU count \"\": " CPUS_EXPECTED);
	if (s[0] == '-')
		return sandlot__error(err, EINVAL, "invalid CPU count %s: must not be negative",
				      quote(s, q));

	struct number n;
	const char *p = scan_number(s, 3, &n);
	if (!p || *p)
		return sandlot__error(err, EINVAL, "invalid CPU count %s: " CPUS_EXPECTED,
				      quote(s, q));
	if (n.extra_nonzero)
		return sandlot__error(err, EINVAL,
				      "invalid CPU count %s: at most 3 decimal places "
				      "(thousandths of a CPU) are supported",
				      quote(s, q));
	uint64_t milli;
	if (!scale(&n, 1000, &milli) || milli > (uint64_t)CPUS_MAX * 1000)
		return sandlot__error(err, ERANGE, "CPU count %s is too large: at most %d",
				      quote(s, q), CPUS_MAX);
	if (milli == 0)
		return sandlot__error(err, EINVAL, "invalid CPU count %s: must be greater than zero",
				      quote(s, q));
	*out_milli = (uint32_t)milli;
	return 0;
}
