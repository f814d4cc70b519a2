/* hello: the smallest complete libsandlot program (docs/libsandlot.md).
 *
 * It creates a sandbox, runs a shell command in it, collects what the
 * command prints, and destroys the sandbox.  Build it against an installed
 * libsandlot with
 *
 *     cc hello.c $(pkg-config --cflags --libs sandlot) -o hello
 *
 * and run it as root (sandboxes take a host uid range, a cgroup and, with
 * the default storage, a loop device).  It prints what the command printed
 * and exits with the command's exit code; on an error of the library it
 * prints the message and exits 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sandlot.h>

/* The command's output, as the library hands it over (the first 4 KiB:
 * enough for a greeting). */
struct output {
	char buf[4096];
	size_t len;
};

/* Called on the library's I/O thread for every piece of output, stdout and
 * stderr alike.  Return 0 to keep receiving. */
static int on_output(void *userdata, sandlot_stream_t stream, const void *data, size_t len)
{
	struct output *out = userdata;
	(void)stream;
	size_t room = sizeof(out->buf) - 1 - out->len;
	if (len > room)
		len = room;
	memcpy(out->buf + out->len, data, len);
	out->len += len;
	return 0;
}

/* Print a library error, free it, and exit. */
static void fail(const char *what, sandlot_error_t *err)
{
	fprintf(stderr, "hello: %s: %s\n", what, sandlot_error_message(err));
	sandlot_error_free(err);
	exit(1);
}

int main(int argc, char **argv)
{
	const char *script = argc > 1 ? argv[1] : "echo hello from $(hostname), uid $(id -u)";
	sandlot_error_t *err = NULL;

	/* Options start from the defaults; sandlot_options_init() also sets
	 * opts.size, which tells the library which version of the struct
	 * this program was built with. */
	sandlot_options_t opts;
	sandlot_options_init(&opts);
	opts.hostname = "hello";
	opts.memory_bytes = 64 << 20;

	sandlot_t *sb = sandlot_create(&opts, &err);
	if (!sb)
		fail("create a sandbox", err);

	/* The command and the callbacks: structs of the caller, so .size too. */
	const char *cmd[] = { "sh", "-c", script, NULL };
	sandlot_exec_spec_t spec = { .size = sizeof(spec), .argv = cmd, .timeout_ms = 30000 };
	struct output out = { .len = 0 };
	sandlot_exec_callbacks_t cb = { .size = sizeof(cb), .on_output = on_output,
					.userdata = &out };
	sandlot_proc_t *proc = sandlot_exec(sb, &spec, &cb, &err);
	if (!proc) {
		sandlot_destroy(sb);
		fail("run the command", err);
	}

	/* All output has been handed to on_output when the wait returns. */
	sandlot_exit_t status = { .size = sizeof(status) };
	if (sandlot_proc_wait(proc, &status, &err) < 0) {
		sandlot_proc_free(proc);
		sandlot_destroy(sb);
		fail("wait for the command", err);
	}
	sandlot_proc_free(proc);
	sandlot_destroy(sb); /* nothing of the sandbox is left after this */

	fwrite(out.buf, 1, out.len, stdout);
	if (status.start_error) {
		fprintf(stderr, "hello: the command could not start: %s\n", status.error);
		return 1;
	}
	return status.signal ? 128 + status.signal : status.exit_code;
}
