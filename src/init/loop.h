/* Internal interface between the parts of sandlot-init's serving loop:
 * loop.c (event loop, stream table, outgoing queue, dispatch), exec.c
 * (processes), files.c (file operations) and scan.c (change tracking).
 *
 * Everything runs on one thread.  A request that produces a long answer
 * (process output, a file, a directory listing, a scan) becomes a *stream*
 * that lives in the loop's table until its last frame is queued.  Streams
 * that produce data without a descriptor to poll (FREAD, LIST, SCAN) have a
 * `pump` that the loop calls while the outgoing queue is short; exec streams
 * are driven by their pipes through `poll_fds`/`on_poll`.
 */
#ifndef SANDLOT_INIT_LOOP_H
#define SANDLOT_INIT_LOOP_H

#include <poll.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdint.h>

#include "common/proto.h"
#include "init.h"

/* Pumps and pipe readers stop producing while this many bytes wait to be
 * written to the host; with credit this bounds init's memory. */
#define INIT_QUEUE_HIGH ((size_t)1024 * 1024)
/* Paths longer than this are refused with EINVAL (the kernel's PATH_MAX). */
#define INIT_PATH_MAX 4096

struct loop;
struct stream;

struct stream_ops {
	/* A frame for this stream that is not a new request (DATA, STDIN,
	 * KILL, CREDIT).  May close the stream.  NULL: such frames are dropped. */
	void (*frame)(struct loop *l, struct stream *s, const struct sl_frame_header *h,
		      const uint8_t *payload);
	/* Produce output (queue frames) without blocking.  Called while
	 * s->ready and the queue is below INIT_QUEUE_HIGH.  May close s. */
	void (*pump)(struct loop *l, struct stream *s);
	/* Add the stream's descriptors to fds[*n] (room for 3 is guaranteed)
	 * and remember where they are. */
	void (*poll_fds)(struct loop *l, struct stream *s, struct pollfd *fds, size_t *n);
	/* Handle the results of poll for the descriptors added above. */
	void (*on_poll)(struct loop *l, struct stream *s, const struct pollfd *fds);
	/* Release everything the stream owns (no frames are sent). */
	void (*destroy)(struct stream *s);
	/* The loop calls frame, pump and destroy between init__as_user() and
	 * init__as_init() (file transfers: creds.c). */
	int as_user;
};

struct stream {
	struct stream *next, *prev;
	uint32_t id;
	const struct stream_ops *ops;
	uint64_t credit;  /* data bytes init may still send on this stream */
	int ready;        /* the pump has work it can do now */
	void *data;       /* owned by the kind (exec.c, files.c, scan.c) */
};

struct snapshot; /* scan.c */

struct loop {
	const struct init_config *cfg;
	int fd;                  /* the connection, non-blocking */
	int sigfd;               /* signalfd for SIGCHLD (and SIGIO in a VM) */
	int host_away;           /* in a VM: the host is not connected to the
				  * port (vm.c); wait for SIGIO */
	int detached;            /* in a VM, after DETACH: nothing is sent and
				  * nothing but CONFIG (the next host's) is read */
	struct sl_reader rd;
	struct qframe *qhead, *qtail; /* frames waiting to be written */
	size_t qbytes;
	struct stream *streams;
	struct snapshot *baseline; /* previous SCAN, NULL before the first */
	uint8_t *scratch;          /* SANDLOT_PROTO_MAX_DATA bytes for reads */
	int done;                  /* stop serving after this iteration */
	int64_t warm_at_ms;        /* prepare the next warm child at this
				    * CLOCK_MONOTONIC time (ms); 0: not asked */
	int status;                /* init's exit status when done */
	/* creds.c: nesting of init__as_user() and what it replaced */
	int user_depth;
	uint32_t saved_effective[2];
	uid_t saved_fsuid;
	gid_t saved_fsgid;
};

/* --- loop.c ------------------------------------------------------------- */

void init__log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Queue a finished frame; takes ownership of m's buffer in every case.  On
 * failure (m failed to build) the connection is given up: the loop ends. */
void init__queue(struct loop *l, struct sl_msg *m);
/* Queue ERROR (errno err > 0, formatted message) / an empty OK on stream id. */
/* init__send_error() with a STAGE record when stage != 0 (EXEC start
 * failures: spec/protocol.md). */
void init__send_errorv(struct loop *l, uint32_t id, int err, char stage, const char *fmt,
		       va_list ap);
void init__send_error(struct loop *l, uint32_t id, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void init__send_ok(struct loop *l, uint32_t id);
/* Queue a data frame (STDOUT, STDERR, DATA) of n <= SANDLOT_PROTO_MAX_DATA
 * bytes. */
void init__send_data(struct loop *l, uint8_t type, uint8_t flags, uint32_t id,
		     const void *p, size_t n);
/* Queue CREDIT of n bytes on stream id. */
void init__send_credit(struct loop *l, uint32_t id, uint32_t n);

/* Add a stream with the given id (not open yet); returns NULL on ENOMEM.
 * Its credit starts at SANDLOT_PROTO_WINDOW. */
struct stream *init__stream_new(struct loop *l, uint32_t id, const struct stream_ops *ops,
				void *data);
/* Remove a stream from the table and destroy it.  Its id is free again. */
void init__stream_close(struct loop *l, struct stream *s);
/* Fatal protocol error or lost connection: stop serving with status. */
void init__fail(struct loop *l, int status, const char *why);

/* Copy the value of a string record into a new string; paths (path=1) are
 * refused with EINVAL when empty, longer than INIT_PATH_MAX or holding NUL.
 * NULL with errno (EPROTO, EINVAL, ENOMEM). */
char *init__rec_string(const struct sl_rec *r, int path);
/* Find the first record `tag` in a payload and decode it as u32: 1 found,
 * 0 absent, -1 if the payload's records or that value are malformed. */
int init__find_u32(const struct sl_frame_header *h, const uint8_t *payload, uint16_t tag,
		   uint32_t *out);
/* Apply a CREDIT frame to s (saturating); malformed frames are ignored. */
void init__add_credit(struct stream *s, const struct sl_frame_header *h, const uint8_t *payload);
/* Absolute form of a protocol path: relative paths are taken relative to
 * the home directory.  New string, or NULL (ENOMEM/ENAMETOOLONG). */
char *init__abs_path(const struct loop *l, const char *path);

/* --- creds.c ------------------------------------------------------------ */

/* Run what follows with the sandbox user's filesystem credentials and no
 * effective capability, until the matching init__as_init() (calls nest).
 * 0, or -1 after init__fail(): the caller must then not do the operation. */
int init__as_user(struct loop *l);
void init__as_init(struct loop *l);

/* --- exec.c ------------------------------------------------------------- */

/* events.c: the sandbox's counters (init.h, fds 10 and 11). */
enum { INIT_EV_OOM, INIT_EV_PIDS, INIT_EVENTS_N };
/* Mark the counters' descriptors close-on-exec and note which are open
 * (before the first fork). */
void init__events_setup(void);
/* Read the counters into out (absent ones 0); returns a bit mask, bit i
 * set when counter i was read. */
unsigned init__events_read(uint64_t out[INIT_EVENTS_N]);
/* Find the line "KEY N" in buf[0..len) (N decimal, fitting 64 bits): 0 with
 * *out, or -1 when there is no such line or its number is malformed. */
int init__events_parse(const char *buf, size_t len, const char *key, uint64_t *out);

/* ATTACH (spec/protocol.md, Detaching): a command left running by an
 * earlier host's DETACH (its stream has id 0) becomes stream h->stream. */
void init__attach_request(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload);
void init__exec_request(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload);
/* SIGCHLD: reap every exited child (orphans included) and record the exit
 * of the ones we started. */
void init__reap(struct loop *l);
/* Prepare the warm child for the next EXEC (see exec.c). */
void init__warm_prepare(struct loop *l);
/* Ask for init__warm_prepare() after delay_ms, once what is queued has been
 * sent (the fork must not delay an answer).  An earlier request wins. */
void init__warm_later(struct loop *l, int delay_ms);
int64_t init__now_ms(void);
/* Send SIGKILL to every process we are responsible for and reap them. */
void init__kill_all(struct loop *l);

/* --- files.c ------------------------------------------------------------ */

void init__fwrite_request(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload);
void init__fread_request(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload);
void init__stat_request(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload);
void init__list_request(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload);
void init__mkdir_request(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload);
void init__remove_request(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload);

/* Open `path` (a protocol path) with openat2, refusing magic links.  Returns
 * the fd or -1 with errno. */
int init__open(const struct loop *l, const char *path, int flags, unsigned mode, uint64_t resolve);
/* 'f', 'd', 'l' or 'o' for a st_mode. */
uint8_t init__ftype(unsigned mode);
/* st_mtim as nanoseconds, clamped to the int64 range. */
int64_t init__ns(long sec, long nsec);

/* --- scan.c ------------------------------------------------------------- */

void init__scan_request(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload);
void init__snapshot_free(struct snapshot *s);
/* Take the first baseline, before the host asks for anything: the first
 * SCAN reports what changed since init started.  Best effort. */
void init__scan_baseline(struct loop *l);

#endif
