/* A hostile sandlot-init for test-lib: libsandlot starts it as the PID 1 of
 * a real sandbox (sandlot_options_t.init_path) and it answers the protocol
 * the way a compromised init could, so the tests can check that the host
 * side refuses what it must (SECURITY.md counts a compromised init as a
 * threat).
 *
 * It does no setup at all (no pivot_root: it never runs user code) and
 * answers one request at a time, blocking.  What it sends is chosen by the
 * request:
 *
 *   CONFIG            OK, or with HOSTNAME "refuse-config" the ERROR an
 *                     init whose set-up failed sends (EACCES, "mount /proc:
 *                     Permission denied"), then it exits 1
 *   LIST <dir>/NAME   one entry "ok", then, by NAME (after an optional
 *                     "dir-" prefix): dotdot "..", dot ".", slash "a/b",
 *                     root "/", empty "", nul "a\0b" (a NUL inside the
 *                     value), anything else nothing more
 *   STAT PATH         a directory if PATH's last component starts with "dir",
 *                     else an empty file
 *   SCAN              baseline: OK; otherwise FAKE_SCAN_MIB MiB of created
 *                     entries with 4000-byte paths, whatever the request's
 *                     limits say
 *   FREAD PATH        FAKE_READ_MIB MiB of zeros in 1 MiB frames, whatever
 *                     the request's limit and the credit say, then OK
 *   EXEC              STARTED, both ENDs, EXIT 0
 *   PING              OK; SHUTDOWN: exit; anything else: ERROR ENOSYS
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/proto.h"

#define FAKE_SCAN_MIB 24
#define FAKE_READ_MIB 8
#define FD_PROTO 3

static void send_msg(struct sl_msg *m)
{
	if (sl_msg_finish(m) < 0)
		_exit(3);
	size_t off = 0;
	while (off < m->len) {
		ssize_t n = write(FD_PROTO, m->buf + off, m->len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			_exit(0); /* the host went away */
		off += (size_t)n;
	}
	sl_msg_free(m);
}

static void send_empty(uint8_t type, uint8_t flags, uint32_t stream)
{
	struct sl_msg m;
	sl_msg_begin(&m, type, flags, stream);
	send_msg(&m);
}

static void send_error(uint32_t stream, int err, const char *msg)
{
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_ERROR, 0, stream);
	sl_msg_put_u32(&m, SL_TAG_ERRNO, (uint32_t)err);
	sl_msg_put_str(&m, SL_TAG_MESSAGE, msg);
	send_msg(&m);
}

/* The PATH record of a request, or "" (NUL-terminated copy in buf). */
static const char *request_path(const uint8_t *p, uint32_t len, char *buf, size_t n)
{
	struct sl_rec_iter it;
	struct sl_rec r;
	buf[0] = '\0';
	sl_rec_iter_init(&it, p, len);
	while (sl_rec_next(&it, &r) == 1)
		if (r.tag == SL_TAG_PATH && r.len < n) {
			memcpy(buf, r.val, r.len);
			buf[r.len] = '\0';
		}
	return buf;
}

static const char *last_component(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

static void put_entry(struct sl_msg *m, const void *name, size_t len)
{
	sl_msg_put_bytes(m, SL_TAG_NAME, name, len);
	sl_msg_put_u8(m, SL_TAG_FTYPE, 'f');
	sl_msg_put_u32(m, SL_TAG_MODE, 0644);
	sl_msg_put_u64(m, SL_TAG_SIZE, 0);
	sl_msg_put_i64(m, SL_TAG_MTIME_NS, 0);
}

static void answer_list(uint32_t id, const char *path)
{
	static const struct {
		const char *key, *name;
		size_t len;
	} bad[] = {
		{ "dotdot", "..", 2 }, { "dot", ".", 1 },  { "slash", "a/b", 3 },
		{ "root", "/", 1 },    { "empty", "", 0 }, { "nul", "a\0b", 3 },
	};
	const char *key = last_component(path);
	if (!strncmp(key, "dir-", 4))
		key += 4;
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_ENTRIES, 0, id);
	put_entry(&m, "ok", 2);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (!strcmp(key, bad[i].key))
			put_entry(&m, bad[i].name, bad[i].len);
	send_msg(&m);
	send_empty(SL_MSG_OK, 0, id);
}

static void answer_stat(uint32_t id, const char *path)
{
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_OK, 0, id);
	int dir = !strncmp(last_component(path), "dir", 3);
	sl_msg_put_u8(&m, SL_TAG_FTYPE, dir ? 'd' : 'f');
	sl_msg_put_u32(&m, SL_TAG_MODE, dir ? 0755 : 0644);
	sl_msg_put_u64(&m, SL_TAG_SIZE, 0);
	sl_msg_put_i64(&m, SL_TAG_MTIME_NS, 0);
	send_msg(&m);
}

static int is_baseline(const uint8_t *p, uint32_t len)
{
	struct sl_rec_iter it;
	struct sl_rec r;
	uint32_t flags = 0;
	sl_rec_iter_init(&it, p, len);
	while (sl_rec_next(&it, &r) == 1)
		if (r.tag == SL_TAG_FLAGS)
			sl_rec_u32(&r, &flags);
	return flags & 1;
}

static void answer_scan(uint32_t id)
{
	static char path[4001];
	uint64_t sent = 0, n = 0;
	while (sent < (uint64_t)FAKE_SCAN_MIB << 20) {
		struct sl_msg m;
		sl_msg_begin(&m, SL_MSG_CHANGES, 0, id);
		for (int i = 0; i < 64; i++, n++) {
			memset(path, 'x', sizeof(path) - 1);
			snprintf(path, 32, "/home/user/%012llu", (unsigned long long)n);
			path[strlen(path)] = 'x';
			sl_msg_put_u8(&m, SL_TAG_KIND, 'c');
			sl_msg_put_str(&m, SL_TAG_PATH, path);
			sl_msg_put_u8(&m, SL_TAG_FTYPE, 'f');
			sl_msg_put_u64(&m, SL_TAG_SIZE, 0);
			sent += sizeof(path) - 1;
		}
		send_msg(&m);
	}
	send_empty(SL_MSG_OK, 0, id);
}

static void answer_fread(uint32_t id)
{
	/* Frames of the largest size a frame may have, far past the credit
	 * window from the first one. */
	static uint8_t zeros[SANDLOT_PROTO_MAX_PAYLOAD];
	for (uint64_t sent = 0; sent < (uint64_t)FAKE_READ_MIB << 20; sent += sizeof(zeros)) {
		struct sl_msg m;
		sl_msg_begin(&m, SL_MSG_DATA, 0, id);
		sl_msg_put_raw(&m, zeros, sizeof(zeros));
		send_msg(&m);
	}
	send_empty(SL_MSG_DATA, SANDLOT_PROTO_FLAG_END, id);
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_OK, 0, id);
	sl_msg_put_u64(&m, SL_TAG_SIZE, (uint64_t)FAKE_READ_MIB << 20);
	send_msg(&m);
}

static void answer_exec(uint32_t id)
{
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_STARTED, 0, id);
	sl_msg_put_u32(&m, SL_TAG_PID, 2);
	send_msg(&m);
	send_empty(SL_MSG_STDOUT, SANDLOT_PROTO_FLAG_END, id);
	send_empty(SL_MSG_STDERR, SANDLOT_PROTO_FLAG_END, id);
	sl_msg_begin(&m, SL_MSG_EXIT, 0, id);
	sl_msg_put_i32(&m, SL_TAG_EXIT_CODE, 0);
	send_msg(&m);
}

/* CONFIG's HOSTNAME is "refuse-config". */
static int refuse_config(const uint8_t *p, uint32_t len)
{
	struct sl_rec_iter it;
	struct sl_rec r;
	sl_rec_iter_init(&it, p, len);
	while (sl_rec_next(&it, &r) == 1)
		if (r.tag == SL_TAG_HOSTNAME && r.len == 13 && !memcmp(r.val, "refuse-config", 13))
			return 1;
	return 0;
}

int main(void)
{
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_HELLO, 0, 0);
	sl_msg_put_u32(&m, SL_TAG_VERSION, SANDLOT_PROTO_VERSION);
	send_msg(&m);

	struct sl_reader rd;
	sl_reader_init(&rd);
	char path[4200];
	for (;;) {
		size_t avail;
		uint8_t *space = sl_reader_space(&rd, &avail);
		if (!space)
			return 3;
		ssize_t n = read(FD_PROTO, space, avail);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return 0;
		sl_reader_commit(&rd, (size_t)n);
		struct sl_frame_header h;
		const uint8_t *p;
		int r;
		while ((r = sl_reader_next(&rd, &h, &p)) == 1) {
			switch (h.type) {
			case SL_MSG_SHUTDOWN:
				return 0;
			case SL_MSG_CONFIG:
				if (refuse_config(p, h.length)) {
					send_error(0, EACCES, "mount /proc: Permission denied");
					return 1;
				}
				send_empty(SL_MSG_OK, 0, 0);
				break;
			case SL_MSG_PING:
				send_empty(SL_MSG_OK, 0, h.stream);
				break;
			case SL_MSG_LIST:
				answer_list(h.stream, request_path(p, h.length, path, sizeof(path)));
				break;
			case SL_MSG_STAT:
				answer_stat(h.stream, request_path(p, h.length, path, sizeof(path)));
				break;
			case SL_MSG_SCAN:
				if (is_baseline(p, h.length))
					send_empty(SL_MSG_OK, 0, h.stream);
				else
					answer_scan(h.stream);
				break;
			case SL_MSG_FREAD:
				answer_fread(h.stream);
				break;
			case SL_MSG_EXEC:
				answer_exec(h.stream);
				break;
			case SL_MSG_CREDIT:
			case SL_MSG_KILL:
			case SL_MSG_STDIN:
			case SL_MSG_DATA:
				break;
			default:
				send_error(h.stream, ENOSYS, "not in the fake init");
				break;
			}
		}
		if (r < 0)
			return 2;
	}
}
