/* What a vm sandbox's console log says about a failed boot (vm.h).  The log
 * is the guest's: its bytes are untrusted (any length, any byte, NULs, no
 * newline at all), so this reads only within buf[0..len) and writes only
 * within out[0..n). */
#include "backend/vm.h"

#include <stdio.h>
#include <string.h>

enum { PICK_MAX = 8, TAIL_LINES = 4, NOTE_LINES = 3 };

struct span {
	size_t start, len;
};

/* Whether the line has the marker of sandlot-init or of a kernel panic. */
static int noteworthy(const char *l, size_t len)
{
	if (!l || len < 12)
		return 0;
	return memmem(l, len, "sandlot-init", 12) != NULL ||
	       memmem(l, len, "Kernel panic", 12) != NULL;
}

/* Append one line: without the kernel's "[    4.338610] " stamp and the
 * blanks around it, printable ASCII only, after " | ".  Returns the new
 * length of out (always NUL-terminated, n >= 1). */
static size_t add_line(char *out, size_t o, size_t n, const char *l, size_t len)
{
	if (len > 0 && l[0] == '[') {
		const char *close = memchr(l, ']', len < 20 ? len : 20);
		if (close) {
			len -= (size_t)(close + 1 - l);
			l = close + 1;
		}
	}
	while (len > 0 && (*l == ' ' || *l == '\t'))
		l++, len--;
	while (len > 0 && (l[len - 1] == '\r' || l[len - 1] == ' ' || l[len - 1] == '\t'))
		len--;
	if (len == 0)
		return o;
	if (o > 0) {
		if (o + 3 >= n)
			return o;
		memcpy(out + o, " | ", 3);
		o += 3;
	}
	for (size_t i = 0; i < len && o + 1 < n; i++) {
		unsigned char c = (unsigned char)l[i];
		out[o++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
	}
	out[o] = '\0';
	return o;
}

void sandlot__vm_console_summary(const char *buf, size_t len, int cut, char *out, size_t n)
{
	if (n == 0)
		return;
	out[0] = '\0';
	/* The lines, from the end: the last TAIL_LINES non-blank ones, and
	 * the last NOTE_LINES noteworthy ones before them. */
	struct span pick[PICK_MAX];
	size_t npick = 0, tail = 0, notes = 0;
	size_t end = len;
	while (end > 0 && npick < PICK_MAX && notes < NOTE_LINES) {
		size_t start = end;
		while (start > 0 && buf[start - 1] != '\n')
			start--;
		/* A first line the reader cut is not a line. */
		if (start == 0 && cut)
			break;
		size_t l = end - start;
		int blank = 1;
		for (size_t i = start; i < end && blank; i++)
			blank = buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r';
		if (!blank && (tail < TAIL_LINES || noteworthy(buf + start, l))) {
			if (tail < TAIL_LINES)
				tail++;
			else
				notes++;
			pick[npick].start = start;
			pick[npick].len = l;
			npick++;
		}
		if (start == 0)
			break;
		end = start - 1; /* before its '\n' */
	}
	size_t o = 0;
	/* Picked from the end: written in the log's order. */
	for (size_t i = npick; i-- > 0;)
		o = add_line(out, o, n, buf + pick[i].start, pick[i].len);
	if (o == 0)
		snprintf(out, n, "(empty)");
}
