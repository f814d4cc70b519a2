/* Codec for the host <-> sandlot-init protocol (spec/protocol.md).
 *
 * This module only encodes and decodes; it does no I/O policy.  It is linked
 * into both libsandlot and the static sandlot-init, so it must not depend on
 * anything but libc.  Every decoder treats its input as untrusted and is
 * reachable from tests/fuzz/fuzz_proto.c.
 */
#ifndef SANDLOT_COMMON_PROTO_H
#define SANDLOT_COMMON_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define SANDLOT_PROTO_VERSION 1
#define SANDLOT_PROTO_HEADER 12
#define SANDLOT_PROTO_MAX_PAYLOAD (1u << 20)
#define SANDLOT_PROTO_MAX_DATA (64u * 1024)       /* data bytes per frame we send */
#define SANDLOT_PROTO_WINDOW (256u * 1024)        /* initial credit per stream */
#define SANDLOT_PROTO_FLAG_END 0x01
/* CONFIG's FLAGS bits. */
#define SL_CONFIG_TMPFS 0x1u      /* the workspace: a tmpfs of DISK bytes made by init */
#define SL_CONFIG_IMAGE 0x2u      /* the root: a built image the backend hands init */
#define SL_CONFIG_NO_WARM 0x4u    /* no spare process for the next command */
#define SL_CONFIG_NO_SECCOMP 0x8u /* commands without a seccomp filter (tests of init) */
#define SL_CONFIG_FLAGS 0xfu

enum sandlot_msg {
	SL_MSG_HELLO = 0x01,
	SL_MSG_ERROR = 0x02,
	SL_MSG_OK = 0x03,
	SL_MSG_PING = 0x04,
	SL_MSG_SHUTDOWN = 0x05,
	SL_MSG_CONFIG = 0x06,   /* host -> init, stream 0, first: the sandbox's configuration */
	SL_MSG_DETACH = 0x07,   /* host -> init (vm): sync, answer OK, then send nothing until
				 * the next host's CONFIG (spec/protocol.md, Detaching) */
	SL_MSG_EXEC = 0x10,
	SL_MSG_STARTED = 0x11,
	SL_MSG_STDOUT = 0x12,
	SL_MSG_STDERR = 0x13,
	SL_MSG_EXIT = 0x14,
	SL_MSG_STDIN = 0x15,
	SL_MSG_KILL = 0x16,
	SL_MSG_CREDIT = 0x17,
	SL_MSG_ATTACH = 0x18,   /* host -> init (vm): PID: take over a command an earlier
				 * host's DETACH left running (spec/protocol.md, Detaching) */
	SL_MSG_FWRITE = 0x20,
	SL_MSG_DATA = 0x21,
	SL_MSG_FREAD = 0x22,
	SL_MSG_STAT = 0x23,
	SL_MSG_LIST = 0x24,
	SL_MSG_ENTRIES = 0x25,
	SL_MSG_MKDIR = 0x26,
	SL_MSG_REMOVE = 0x27,
	SL_MSG_SCAN = 0x28,
	SL_MSG_CHANGES = 0x29,
};

enum sandlot_tag {
	SL_TAG_VERSION = 1,
	SL_TAG_ERRNO = 2,
	SL_TAG_MESSAGE = 3,
	SL_TAG_ARG = 4,
	SL_TAG_ENV = 5,
	SL_TAG_CWD = 6,
	SL_TAG_STDIN = 7,
	SL_TAG_PID = 8,
	SL_TAG_EXIT_CODE = 9,
	SL_TAG_SIGNAL = 10,
	SL_TAG_PATH = 11,
	SL_TAG_MODE = 12,
	SL_TAG_FLAGS = 13,
	SL_TAG_SIZE = 14,
	SL_TAG_FTYPE = 15,
	SL_TAG_MTIME_NS = 16,
	SL_TAG_NAME = 17,
	SL_TAG_KIND = 18,
	SL_TAG_CREDIT = 19,
	SL_TAG_TRUNCATED = 20,
	SL_TAG_CORE = 21,
	SL_TAG_STAGE = 22,
	SL_TAG_ALLOCATED = 23, /* u64: bytes the file takes on disk (STAT, ENTRIES) */
	SL_TAG_MAX_BYTES = 24, /* u64: FREAD: largest file to send; SCAN: most CHANGES bytes */
	SL_TAG_MEMORY = 25,    /* u64: SCAN: most memory the walk may use */
	SL_TAG_OOM_KILLS = 26, /* u64: EXIT: OOM kills in the sandbox while the command ran */
	SL_TAG_PIDS_REFUSED = 27, /* u64: EXIT: forks the pids limit refused meanwhile */
	/* CONFIG's records (spec/protocol.md, "Configuration"). */
	SL_TAG_UID = 28,       /* u32 */
	SL_TAG_GID = 29,       /* u32 */
	SL_TAG_NOFILE = 30,    /* u64: RLIMIT_NOFILE of commands */
	SL_TAG_FSIZE = 31,     /* u64: RLIMIT_FSIZE of commands */
	SL_TAG_DISK = 32,      /* u64: size of a tmpfs workspace */
	SL_TAG_PIDS = 33,      /* u32: the sandbox's pids limit */
	SL_TAG_HOSTNAME = 34,  /* str */
	SL_TAG_HOME = 35,      /* str */
	SL_TAG_WORKDIR = 36,   /* str: default cwd of commands */
	SL_TAG_USER = 37,      /* str: login name of the sandbox user */
	SL_TAG_SECCOMP = 38,   /* bytes: struct sock_filter array */
	SL_TAG_TIME = 39,      /* u64: CONFIG (vm): the host's CLOCK_REALTIME in ns */
	SL_TAG_SEED = 40,      /* bytes: CONFIG (vm): 16 to 64 random bytes for the guest's RNG */
	/* CONFIG, a VM guest's NIC (IPv4 addresses as u32 numbers). */
	SL_TAG_NET_ADDR = 41,    /* u32: the guest's address */
	SL_TAG_NET_PREFIX = 42,  /* u32: its prefix length */
	SL_TAG_NET_GATEWAY = 43, /* u32: the default route's gateway */
	SL_TAG_NET_DNS = 44,     /* u32: the resolver /etc/resolv.conf names */
	SL_TAG_NET_RELAY = 45,   /* u32: TCP port of init's port relay */
	SL_TAG_LAST = 46,        /* u8: EXEC: 1 = the sandbox's last command (no spare process after it) */
};

/* A decoded frame header. */
struct sl_frame_header {
	uint32_t length;
	uint8_t type;
	uint8_t flags;
	uint32_t stream;
};

/* Whether `type` is a message type defined by the spec. */
int sl_msg_known(uint8_t type);

/* Parse the 12-byte header at `buf` (which must hold SANDLOT_PROTO_HEADER
 * bytes).  Returns 0, or -1 with errno = EPROTO when the header breaks the
 * rules (too long, reserved bits, unknown flags or type). */
int sl_header_decode(const uint8_t *buf, struct sl_frame_header *out);
void sl_header_encode(uint8_t *buf, uint32_t length, uint8_t type, uint8_t flags,
		      uint32_t stream);

/* --- building frames ---------------------------------------------------- */

/* A growable frame under construction: header followed by payload.  Start
 * with sl_msg_begin(), append records, then sl_msg_finish() patches the
 * length.  On allocation failure or when the payload would exceed the
 * maximum, `failed` is set and further appends are ignored;
 * sl_msg_finish() then returns -1 (errno ENOMEM or EMSGSIZE). */
struct sl_msg {
	uint8_t *buf;
	size_t len, cap;
	int failed;
};

void sl_msg_begin(struct sl_msg *m, uint8_t type, uint8_t flags, uint32_t stream);
void sl_msg_put_u8(struct sl_msg *m, uint16_t tag, uint8_t v);
void sl_msg_put_u32(struct sl_msg *m, uint16_t tag, uint32_t v);
void sl_msg_put_i32(struct sl_msg *m, uint16_t tag, int32_t v);
void sl_msg_put_u64(struct sl_msg *m, uint16_t tag, uint64_t v);
void sl_msg_put_i64(struct sl_msg *m, uint16_t tag, int64_t v);
void sl_msg_put_str(struct sl_msg *m, uint16_t tag, const char *s);
void sl_msg_put_bytes(struct sl_msg *m, uint16_t tag, const void *p, size_t n);
/* Append raw payload bytes (for data frames). */
void sl_msg_put_raw(struct sl_msg *m, const void *p, size_t n);
/* Finalize: on success returns 0 and the frame is m->buf[0..m->len). */
int sl_msg_finish(struct sl_msg *m);
void sl_msg_free(struct sl_msg *m);

/* --- reading records ---------------------------------------------------- */

/* Iterator over the records of a control payload. */
struct sl_rec_iter {
	const uint8_t *p;
	size_t left;
};

struct sl_rec {
	uint16_t tag;
	uint32_t len;
	const uint8_t *val;
};

void sl_rec_iter_init(struct sl_rec_iter *it, const uint8_t *payload, size_t len);
/* Returns 1 with *rec filled, 0 at the clean end, -1 (errno EPROTO) when the
 * remaining bytes do not form a record. */
int sl_rec_next(struct sl_rec_iter *it, struct sl_rec *rec);

/* Typed accessors: return 0, or -1 (errno EPROTO) if the value has the wrong
 * size or (strings) contains a NUL byte.  sl_rec_str copies into a new
 * NUL-terminated malloc'd string (NULL + ENOMEM on allocation failure). */
int sl_rec_u8(const struct sl_rec *r, uint8_t *out);
int sl_rec_u32(const struct sl_rec *r, uint32_t *out);
int sl_rec_i32(const struct sl_rec *r, int32_t *out);
int sl_rec_u64(const struct sl_rec *r, uint64_t *out);
int sl_rec_i64(const struct sl_rec *r, int64_t *out);
char *sl_rec_str(const struct sl_rec *r);

/* --- incremental stream reader ------------------------------------------ */

/* Accumulates bytes read from the connection and yields whole frames.
 * Memory stays bounded by one maximal frame. */
struct sl_reader {
	uint8_t *buf;
	size_t len, cap;
	int broken;          /* set after a fatal protocol error */
};

void sl_reader_init(struct sl_reader *r);
void sl_reader_free(struct sl_reader *r);
/* Space to read into: returns a pointer with at least *avail bytes free
 * (grows the buffer; NULL + ENOMEM on failure).  After reading n bytes into
 * it, call sl_reader_commit(r, n). */
uint8_t *sl_reader_space(struct sl_reader *r, size_t *avail);
void sl_reader_commit(struct sl_reader *r, size_t n);
/* Feed bytes by copy (convenience for tests and the fuzzer). */
int sl_reader_feed(struct sl_reader *r, const void *data, size_t n);
/* Pop the next complete frame: returns 1 and fills *h and *payload (valid
 * until the next call on r), 0 if more bytes are needed, -1 (errno EPROTO)
 * on a fatal protocol error, after which r->broken is set. */
int sl_reader_next(struct sl_reader *r, struct sl_frame_header *h, const uint8_t **payload);

#endif
