/* Error contract shared by every sandlot component (see docs/errors.md).
 *
 * A fallible function takes `sandlot_error_t **err` as its last argument and
 * returns -1 (or NULL) on failure after storing a newly allocated error in
 * *err.  The caller owns that error and must free it with sandlot_error_free()
 * or pass it further up.  On success *err is left untouched.  Passing
 * err == NULL is allowed: the error is then discarded.
 *
 * An error carries an errno-style status (always > 0) and a message that reads
 * as one line, outermost context first: "create sandbox: mount workspace:
 * No such device".  sandlot__error_wrap() adds such context on the way up.
 */
#ifndef SANDLOT_COMMON_ERROR_H
#define SANDLOT_COMMON_ERROR_H

#include "sandlot.h"

#include <stdarg.h>

#define SANDLOT_ERROR_DETAILS 4

struct sandlot_error {
	int status;
	char *msg;
	/* Structured details (sandlot__error_detail()): keys are static
	 * strings, values owned (NULL: a detail whose value is none). */
	unsigned ndetails;
	const char *detail_key[SANDLOT_ERROR_DETAILS];
	char *detail_value[SANDLOT_ERROR_DETAILS];
};

/* Store a new error with `status` (an errno value; 0 becomes EIO) and a
 * printf-style message.  Always returns -1 so callers can `return
 * sandlot__error(...)`.  If *err already holds an error it is replaced. */
int sandlot__error(sandlot_error_t **err, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Like sandlot__error() but appends ": strerror(status)". */
int sandlot__error_errno(sandlot_error_t **err, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Prefix the message of an existing error with context ("ctx: old message").
 * Keeps the status.  Returns -1.  A NULL err or *err is tolerated. */
int sandlot__error_wrap(sandlot_error_t **err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Attach a detail to the error in *err: a static key and a copy of value
 * (NULL: none), e.g. the state of the sandbox an error is about, which
 * sandlotd answers as a field of its JSON error.  A key given again
 * replaces its value.  Best effort: with no error, out of memory or past
 * SANDLOT_ERROR_DETAILS the error is left as it is.  Returns -1. */
int sandlot__error_detail(sandlot_error_t **err, const char *key, const char *value);
/* The i-th detail's key (and *value), or NULL past the last. */
const char *sandlot__error_detail_at(const sandlot_error_t *err, unsigned i, const char **value);

#endif
