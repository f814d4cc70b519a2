#include "error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Allocation failure while building an error must not lose the error: fall
 * back to a static one whose message is fixed.  It is never freed. */
static struct sandlot_error oom_error = { ENOMEM, (char *)"out of memory", 0, { 0 }, { 0 } };

static int set_error(sandlot_error_t **err, int status, char *msg)
{
	if (!err) {
		free(msg);
		return -1;
	}
	sandlot_error_free(*err);
	if (!msg) {
		*err = &oom_error;
		return -1;
	}
	struct sandlot_error *e = calloc(1, sizeof(*e));
	if (!e) {
		free(msg);
		*err = &oom_error;
		return -1;
	}
	e->status = status > 0 ? status : EIO;
	e->msg = msg;
	*err = e;
	return -1;
}

int sandlot__error(sandlot_error_t **err, int status, const char *fmt, ...)
{
	char *msg = NULL;
	va_list ap;
	va_start(ap, fmt);
	if (vasprintf(&msg, fmt, ap) < 0)
		msg = NULL;
	va_end(ap);
	return set_error(err, status, msg);
}

int sandlot__error_errno(sandlot_error_t **err, int status, const char *fmt, ...)
{
	char *head = NULL, *msg = NULL;
	va_list ap;
	va_start(ap, fmt);
	if (vasprintf(&head, fmt, ap) < 0)
		head = NULL;
	va_end(ap);
	if (head && asprintf(&msg, "%s: %s", head, strerror(status)) < 0)
		msg = NULL;
	free(head);
	return set_error(err, status, msg);
}

int sandlot__error_wrap(sandlot_error_t **err, const char *fmt, ...)
{
	if (!err || !*err || *err == &oom_error)
		return -1;
	char *ctx = NULL, *msg = NULL;
	va_list ap;
	va_start(ap, fmt);
	if (vasprintf(&ctx, fmt, ap) < 0)
		ctx = NULL;
	va_end(ap);
	if (ctx && asprintf(&msg, "%s: %s", ctx, (*err)->msg) >= 0) {
		free((*err)->msg);
		(*err)->msg = msg;
	}
	free(ctx);
	return -1;
}

int sandlot_error_status(const sandlot_error_t *err)
{
	return err ? err->status : 0;
}

const char *sandlot_error_message(const sandlot_error_t *err)
{
	return err ? err->msg : "";
}

void sandlot_error_free(sandlot_error_t *err)
{
	if (!err || err == &oom_error)
		return;
	free(err->msg);
	for (unsigned i = 0; i < err->ndetails; i++)
		free(err->detail_value[i]);
	free(err);
}

int sandlot__error_detail(sandlot_error_t **err, const char *key, const char *value)
{
	if (!err || !*err || *err == &oom_error || !key)
		return -1;
	struct sandlot_error *e = *err;
	char *copy = NULL;
	if (value && !(copy = strdup(value)))
		return -1;
	unsigned i = 0;
	while (i < e->ndetails && strcmp(e->detail_key[i], key) != 0)
		i++;
	if (i == SANDLOT_ERROR_DETAILS) {
		free(copy);
		return -1;
	}
	if (i == e->ndetails) {
		e->detail_key[i] = key;
		e->ndetails++;
	} else {
		free(e->detail_value[i]);
	}
	e->detail_value[i] = copy;
	return -1;
}

const char *sandlot__error_detail_at(const sandlot_error_t *err, unsigned i, const char **value)
{
	if (!err || i >= err->ndetails)
		return NULL;
	if (value)
		*value = err->detail_value[i];
	return err->detail_key[i];
}
