/* The static `sandlot` is linked against musl (src/cli/meson.build), but the
 * static archives of jansson and libseccomp it links in come from the
 * distribution, compiled against glibc with _FORTIFY_SOURCE: they call
 * glibc's checked variants of a few string functions, which musl does not
 * have.  These are those variants, with the same contract: the copy or
 * the print is done when it fits the destination's size as the compiler
 * knew it (`destlen`), and the program aborts when it would not (an
 * overflow, which glibc reports and aborts on too).
 *
 * Compiled into the musl build only. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int __vsnprintf_chk(char *s, size_t maxlen, int flag, size_t slen, const char *fmt, va_list ap);
int __snprintf_chk(char *s, size_t maxlen, int flag, size_t slen, const char *fmt, ...);
int __fprintf_chk(FILE *f, int flag, const char *fmt, ...);
char *__strncpy_chk(char *dst, const char *src, size_t n, size_t destlen);

int __vsnprintf_chk(char *s, size_t maxlen, int flag, size_t slen, const char *fmt, va_list ap)
{
	(void)flag;
	if (maxlen > slen)
		abort();
	return vsnprintf(s, maxlen, fmt, ap);
}

int __snprintf_chk(char *s, size_t maxlen, int flag, size_t slen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = __vsnprintf_chk(s, maxlen, flag, slen, fmt, ap);
	va_end(ap);
	return n;
}

int __fprintf_chk(FILE *f, int flag, const char *fmt, ...)
{
	(void)flag;
	va_list ap;
	va_start(ap, fmt);
	int n = vfprintf(f, fmt, ap);
	va_end(ap);
	return n;
}

char *__strncpy_chk(char *dst, const char *src, size_t n, size_t destlen)
{
	if (n > destlen)
		abort();
	return strncpy(dst, src, n);
}
