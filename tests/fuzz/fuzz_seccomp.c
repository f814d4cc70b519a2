/* Fuzz entry point for the seccomp policy language (src/linux/seccomp.c,
 * the syntax at the top of spec/seccomp-policy.txt).
 *
 * The input is policy text (up to its first NUL).  It compiles into a
 * libseccomp filter, or fails with EINVAL and a message naming a line of
 * the text ("seccomp policy line N: ...") or the missing default line.  A
 * filter that compiles also exports as BPF.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "linux/seccomp.h"
#include "fuzz.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 65536)
		return 0;
	char *text = malloc(size + 1);
	check(text != NULL);
	memcpy(text, data, size);
	text[size] = '\0';
	unsigned lines = 1;
	for (const char *p = text; *p; p++)
		lines += *p == '\n';
	scmp_filter_ctx ctx = NULL;
	sandlot_error_t *err = NULL;
	int n = sandlot__seccomp_compile(text, &ctx, &err);
	if (n < 0) {
		check(err != NULL && ctx == NULL && sandlot_error_status(err) == EINVAL);
		const char *msg = sandlot_error_message(err);
		unsigned line = 0;
		if (sscanf(msg, "seccomp policy line %u:", &line) == 1)
			check(line >= 1 && line <= lines);
		else
			check(strcmp(msg, "seccomp policy: no 'default' line") == 0);
		sandlot_error_free(err);
	} else {
		check(err == NULL && ctx != NULL && (unsigned)n <= lines);
		int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
		check(fd >= 0);
		check(seccomp_export_bpf(ctx, fd) == 0);
		close(fd);
		seccomp_release(ctx);
	}
	free(text);
	return 0;
}
