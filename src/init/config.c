/* The start of sandlot-init's protocol: HELLO out, the host's CONFIG in
 * (spec/protocol.md, "Configuration"), the set-up, and ERROR when any of
 * it fails.  init_serve() (loop.c) answers OK and takes over from there.
 */
#include "init.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Set by init_vm_boot() (vm.c); defined here, where CONFIG is checked
 * against it. */
int init__vm_mode;

/* The defaults of what CONFIG leaves out. */
static void config_defaults(struct init_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->uid = 1000;
	cfg->gid = 1000;
	cfg->hostname = "sandbox";
	cfg->home = INIT_HOME;
	cfg->user_name = "user";
}

void init_config_free(struct init_config *cfg)
{
	for (size_t i = 0; i < sizeof(cfg->owned) / sizeof(cfg->owned[0]); i++)
		free(cfg->owned[i]);
	free(cfg->filter);
	config_defaults(cfg);
}

static int bad(char *why, size_t n, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int bad(char *why, size_t n, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, n, fmt, ap);
	va_end(ap);
	return err;
}

/* The checks of a string record's value (it has no NUL: sl_rec_str). */
static int check_hostname(const char *v)
{
	return *v && strlen(v) <= 64;
}

static int check_abs_dir(const char *v)
{
	size_t n = strlen(v);
	return v[0] == '/' && n <= 1024 && (n == 1 || v[n - 1] != '/');
}

static int check_workdir(const char *v)
{
	return v[0] == '/' && strlen(v) <= 1024;
}

/* It goes into a passwd line: no separators, no newlines. */
static int check_user(const char *v)
{
	size_t n = strlen(v);
	return n > 0 && n <= 32 && !strpbrk(v, ":\n/ \t");
}

/* The string records: where each goes and how it is checked. */
static const struct str_field {
	uint16_t tag;
	const char *name;
	size_t offset;
	int (*check)(const char *);
} str_fields[] = {
	{ SL_TAG_HOSTNAME, "HOSTNAME", offsetof(struct init_config, hostname), check_hostname },
	{ SL_TAG_HOME, "HOME", offsetof(struct init_config, home), check_abs_dir },
	{ SL_TAG_WORKDIR, "WORKDIR", offsetof(struct init_config, workdir), check_workdir },
	{ SL_TAG_USER, "USER", offsetof(struct init_config, user_name), check_user },
};

/* The u64 records: where each goes. */
static const struct u64_field {
	uint16_t tag;
	const char *name;
	size_t offset;
} u64_fields[] = {
	{ SL_TAG_NOFILE, "NOFILE", offsetof(struct init_config, nofile) },
	{ SL_TAG_FSIZE, "FSIZE", offsetof(struct init_config, fsize) },
	{ SL_TAG_DISK, "DISK", offsetof(struct init_config, disk) },
	{ SL_TAG_MEMORY, "MEMORY", offsetof(struct init_config, scan_memory) },
	{ SL_TAG_TIME, "TIME", offsetof(struct init_config, time_ns) },
};

_Static_assert(sizeof(str_fields) / sizeof(str_fields[0]) ==
		       sizeof(((struct init_config *)0)->owned) / sizeof(char *),
	       "one owned slot per string record");

/* One record into cfg: 0 or an errno value with why. */
static int decode_record(const struct sl_rec *r, struct init_config *cfg, uint32_t *flags,
			 int *has_seccomp, char *why, size_t n)
{
	uint32_t u32;
	uint64_t u64;
	for (size_t i = 0; i < sizeof(str_fields) / sizeof(str_fields[0]); i++) {
		const struct str_field *f = &str_fields[i];
		if (r->tag != f->tag)
			continue;
		char *v = sl_rec_str(r);
		if (!v)
			return errno == ENOMEM ? bad(why, n, ENOMEM, "CONFIG: out of memory")
					       : bad(why, n, EPROTO, "CONFIG: malformed %s record", f->name);
		if (!f->check(v)) {
			free(v);
			return bad(why, n, EINVAL, "CONFIG: bad %s record", f->name);
		}
		free(cfg->owned[i]);
		cfg->owned[i] = v;
		*(const char **)((char *)cfg + f->offset) = v;
		return 0;
	}
	for (size_t i = 0; i < sizeof(u64_fields) / sizeof(u64_fields[0]); i++) {
		const struct u64_field *f = &u64_fields[i];
		if (r->tag != f->tag)
			continue;
		if (sl_rec_u64(r, &u64) < 0)
			return bad(why, n, EPROTO, "CONFIG: malformed %s record", f->name);
		*(uint64_t *)((char *)cfg + f->offset) = u64;
		return 0;
	}
	switch (r->tag) {
	case SL_TAG_FLAGS:
		if (sl_rec_u32(r, flags) < 0)
			return bad(why, n, EPROTO, "CONFIG: malformed FLAGS record");
		if (*flags & ~SL_CONFIG_FLAGS)
			return bad(why, n, EINVAL, "CONFIG: unknown FLAGS bits 0x%x",
				   *flags & ~SL_CONFIG_FLAGS);
		return 0;
	case SL_TAG_UID:
	case SL_TAG_GID:
		if (sl_rec_u32(r, &u32) < 0)
			return bad(why, n, EPROTO, "CONFIG: malformed %s record",
				   r->tag == SL_TAG_UID ? "UID" : "GID");
		/* (uid_t)-1 means "unchanged" to the set*id calls: refuse it. */
		if (u32 == UINT32_MAX)
			return bad(why, n, EINVAL, "CONFIG: bad %s record",
				   r->tag == SL_TAG_UID ? "UID" : "GID");
		if (r->tag == SL_TAG_UID)
			cfg->uid = (uid_t)u32;
		else
			cfg->gid = (gid_t)u32;
		return 0;
	case SL_TAG_NET_ADDR:
	case SL_TAG_NET_PREFIX:
	case SL_TAG_NET_GATEWAY:
	case SL_TAG_NET_DNS:
	case SL_TAG_NET_RELAY:
		if (sl_rec_u32(r, &u32) < 0)
			return bad(why, n, EPROTO, "CONFIG: malformed NET_* record (tag %u)",
				   (unsigned)r->tag);
		*(r->tag == SL_TAG_NET_ADDR      ? &cfg->net_addr
		  : r->tag == SL_TAG_NET_PREFIX  ? &cfg->net_prefix
		  : r->tag == SL_TAG_NET_GATEWAY ? &cfg->net_gateway
		  : r->tag == SL_TAG_NET_DNS     ? &cfg->net_dns
						 : &cfg->net_relay) = u32;
		return 0;
	case SL_TAG_PIDS:
		if (sl_rec_u32(r, &u32) < 0)
			return bad(why, n, EPROTO, "CONFIG: malformed PIDS record");
		cfg->pids = u32;
		return 0;
	case SL_TAG_SECCOMP:
		if (r->len == 0 || r->len % sizeof(struct sock_filter) != 0 ||
		    r->len / sizeof(struct sock_filter) > BPF_MAXINSNS)
			return bad(why, n, EINVAL,
				   "CONFIG: a SECCOMP record of %u bytes is no seccomp program "
				   "(1 to %d instructions of %zu bytes)",
				   r->len, BPF_MAXINSNS, sizeof(struct sock_filter));
		free(cfg->filter);
		cfg->filter = malloc(r->len);
		if (!cfg->filter)
			return bad(why, n, ENOMEM, "CONFIG: out of memory");
		memcpy(cfg->filter, r->val, r->len);
		cfg->filter_len = (unsigned short)(r->len / sizeof(struct sock_filter));
		*has_seccomp = 1;
		return 0;
	case SL_TAG_SEED:
		if (r->len < 16 || r->len > sizeof(cfg->seed))
			return bad(why, n, EINVAL, "CONFIG: a SEED record of %u bytes (16 to %zu)",
				   r->len, sizeof(cfg->seed));
		memcpy(cfg->seed, r->val, r->len);
		cfg->seed_len = r->len;
		return 0;
	default:
		return 0; /* unknown tags: ignored, as everywhere */
	}
}

int init_config_decode(const uint8_t *payload, size_t len, struct init_config *cfg, char *why,
		       size_t why_size)
{
	config_defaults(cfg);
	uint32_t flags = 0;
	int has_seccomp = 0, rc = 0, more;
	struct sl_rec_iter it;
	struct sl_rec r;
	sl_rec_iter_init(&it, payload, len);
	while (rc == 0 && (more = sl_rec_next(&it, &r)) != 0) {
		if (more < 0)
			rc = bad(why, why_size, EPROTO, "CONFIG: truncated record");
		else
			rc = decode_record(&r, cfg, &flags, &has_seccomp, why, why_size);
	}
	if (rc == 0) {
		cfg->tmpfs_storage = !!(flags & SL_CONFIG_TMPFS);
		cfg->image = !!(flags & SL_CONFIG_IMAGE);
		cfg->no_warm = !!(flags & SL_CONFIG_NO_WARM);
		cfg->no_seccomp = !!(flags & SL_CONFIG_NO_SECCOMP);
		if (cfg->no_seccomp && has_seccomp)
			rc = bad(why, why_size, EINVAL, "CONFIG: a SECCOMP record with the NO_SECCOMP flag");
		else if (!cfg->no_seccomp && !has_seccomp)
			rc = bad(why, why_size, EINVAL, "CONFIG: no SECCOMP record (the seccomp program)");
		else if (cfg->tmpfs_storage && cfg->disk == 0)
			rc = bad(why, why_size, EINVAL, "CONFIG: the TMPFS flag needs a DISK record");
		else if (cfg->net_addr && (cfg->net_prefix < 1 || cfg->net_prefix > 30 ||
					   !cfg->net_gateway || !cfg->net_dns ||
					   cfg->net_relay > 65535))
			rc = bad(why, why_size, EINVAL,
				 "CONFIG: NET_ADDR needs NET_PREFIX (1 to 30), NET_GATEWAY and NET_DNS, "
				 "and NET_RELAY is a TCP port");
		else if (!cfg->net_addr && (cfg->net_prefix || cfg->net_gateway || cfg->net_dns ||
					    cfg->net_relay))
			rc = bad(why, why_size, EINVAL, "CONFIG: NET_* records without NET_ADDR");
	}
	if (rc != 0)
		init_config_free(cfg);
	return rc;
}

int init_write_frame(int fd, struct sl_msg *m)
{
	if (sl_msg_finish(m) < 0) {
		int e = errno;
		sl_msg_free(m);
		errno = e;
		return -1;
	}
	size_t off = 0;
	int rc = 0;
	while (off < m->len) {
		ssize_t n = write(fd, m->buf + off, m->len - off);
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			struct pollfd p = { .fd = fd, .events = POLLOUT };
			if (poll(&p, 1, -1) >= 0 || errno == EINTR)
				continue;
		}
		if (n == 0)
			errno = EPIPE;
		rc = -1;
		break;
	}
	int e = errno;
	sl_msg_free(m);
	errno = e;
	return rc;
}

/* ERROR on stream 0, best effort (the host may be gone). */
static void send_error(int err, const char *msg)
{
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_ERROR, 0, 0);
	sl_msg_put_u32(&m, SL_TAG_ERRNO, (uint32_t)(err > 0 ? err : EIO));
	sl_msg_put_str(&m, SL_TAG_MESSAGE, msg);
	if (init_write_frame(INIT_FD_PROTO, &m) < 0) {
		/* nothing more to tell anyone */
	}
}

/* Read until the first whole frame: 1 with it, 0 at EOF (the host went
 * away), -1 with errno (EPROTO: not a frame). */
static int read_first_frame(struct sl_reader *rd, struct sl_frame_header *h, const uint8_t **payload)
{
	for (;;) {
		int r = sl_reader_next(rd, h, payload);
		if (r != 0)
			return r;
		size_t avail;
		uint8_t *p = sl_reader_space(rd, &avail);
		if (!p)
			return -1;
		ssize_t n = read(INIT_FD_PROTO, p, avail);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			struct pollfd pf = { .fd = INIT_FD_PROTO, .events = POLLIN };
			poll(&pf, 1, -1);
			continue;
		}
		if (n < 0)
			return -1;
		if (n == 0)
			return 0;
		sl_reader_commit(rd, (size_t)n);
	}
}

int init_start(struct init_config *cfg, struct sl_reader *rd)
{
	config_defaults(cfg);
	/* HELLO before anything else, so that it crosses the host's CONFIG on
	 * the wire instead of costing a round trip. */
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_HELLO, 0, 0);
	sl_msg_put_u32(&m, SL_TAG_VERSION, SANDLOT_PROTO_VERSION);
	if (init_write_frame(INIT_FD_PROTO, &m) < 0)
		return -1; /* the host is gone */

	struct sl_frame_header h;
	const uint8_t *payload;
	int r = read_first_frame(rd, &h, &payload);
	if (r <= 0)
		return -1; /* gone, or not speaking the protocol: nothing to answer */
	if (h.type != SL_MSG_CONFIG || h.stream != 0) {
		/* Fatal, as a malformed frame: the host is not one we know. */
		send_error(EPROTO, "the host's first frame was not CONFIG on stream 0");
		return -1;
	}
	char why[256];
	int err = init_config_decode(payload, h.length, cfg, why, sizeof(why));
	if (err == 0 && cfg->net_addr && !init__vm_mode) {
		err = EINVAL;
		snprintf(why, sizeof(why), "CONFIG: NET_* records are for a VM's guest (an ns "
			 "sandbox's network is the host's to set up)");
		init_config_free(cfg);
	}
	if (err != 0) {
		send_error(err, why);
		return -1;
	}
	if (init_setup(cfg) < 0) {
		const char *msg = init_setup_error(&err);
		send_error(err, msg);
		init_config_free(cfg);
		return -1;
	}
	return 0;
}
