/* Fuzz entry point for sandlot-init's decoder of CONFIG
 * (init_config_decode in src/init/config.c): the payload of the host's first
 * frame, the sandbox's configuration (spec/protocol.md, "Configuration").
 *
 * Input: the payload.
 * Oracle: the decoder answers 0, EPROTO, EINVAL or ENOMEM; an error comes
 * with a message starting "CONFIG: "; on success every value holds what the
 * spec allows (names and paths checked, a seccomp program of 1 to 4096
 * whole instructions exactly when NO_SECCOMP is not set, a DISK with TMPFS,
 * no uid or gid of -1), and decoding the same bytes again gives the same
 * configuration.  It never reads past the input (ASan) and frees what it
 * allocated (init_config_free, LeakSanitizer).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "init/init.h"
#include "fuzz.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

static int same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void check_config(const struct init_config *c)
{
	check(c->uid != (uid_t)-1 && c->gid != (gid_t)-1);
	size_t hn = strlen(c->hostname);
	check(hn >= 1 && hn <= 64);
	size_t hl = strlen(c->home);
	check(c->home[0] == '/' && (hl == 1 || c->home[hl - 1] != '/'));
	check(!c->workdir || (c->workdir[0] == '/' && strlen(c->workdir) <= 1024));
	size_t ul = strlen(c->user_name);
	check(ul >= 1 && ul <= 32 && !strpbrk(c->user_name, ":\n/ \t"));
	if (c->no_seccomp)
		check(!c->filter && c->filter_len == 0);
	else
		check(c->filter && c->filter_len >= 1 && c->filter_len <= BPF_MAXINSNS);
	check(!c->tmpfs_storage || c->disk > 0);
	check(c->seed_len == 0 || (c->seed_len >= 16 && c->seed_len <= sizeof(c->seed)));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct init_config a, b;
	char why[256], why2[256];
	why[0] = '\0';
	int rc = init_config_decode(data, size, &a, why, sizeof(why));
	check(rc == 0 || rc == EPROTO || rc == EINVAL || rc == ENOMEM);
	if (rc != 0) {
		check(strncmp(why, "CONFIG: ", 8) == 0);
		return 0;
	}
	check_config(&a);
	int rc2 = init_config_decode(data, size, &b, why2, sizeof(why2));
	check(rc2 == 0 || rc2 == ENOMEM);
	if (rc2 == 0) {
		check(a.time_ns == b.time_ns && a.seed_len == b.seed_len &&
		      memcmp(a.seed, b.seed, a.seed_len) == 0);
		check(a.uid == b.uid && a.gid == b.gid && a.nofile == b.nofile && a.fsize == b.fsize &&
		      a.disk == b.disk && a.pids == b.pids && a.scan_memory == b.scan_memory);
		check(a.no_seccomp == b.no_seccomp && a.no_warm == b.no_warm &&
		      a.tmpfs_storage == b.tmpfs_storage && a.image == b.image);
		check(same_str(a.hostname, b.hostname) && same_str(a.home, b.home) &&
		      same_str(a.workdir, b.workdir) && same_str(a.user_name, b.user_name));
		check(a.filter_len == b.filter_len &&
		      (!a.filter || memcmp(a.filter, b.filter, a.filter_len * sizeof(*a.filter)) == 0));
		init_config_free(&b);
	}
	init_config_free(&a);
	return 0;
}

/* Records of CONFIG's tags (and a few others), with values of the right
 * size most of the time: short strings from an alphabet with the
 * separators the checks look for, small and edge integers. */
size_t fuzz_generate(uint64_t (*rng)(void), uint8_t *buf, size_t max)
{
	static const uint16_t tags[] = { SL_TAG_FLAGS, SL_TAG_MEMORY, SL_TAG_UID,    SL_TAG_GID,
					 SL_TAG_NOFILE, SL_TAG_FSIZE, SL_TAG_DISK,   SL_TAG_PIDS,
					 SL_TAG_HOSTNAME, SL_TAG_HOME, SL_TAG_WORKDIR, SL_TAG_USER,
					 SL_TAG_SECCOMP, SL_TAG_TIME,  SL_TAG_SEED,  1,
					 999 };
	static const char alphabet[] = "ab/:. \n\tx";
	size_t n = 0;
	while (n + 6 + 80 < max && rng() % 8) {
		uint16_t tag = tags[rng() % (sizeof(tags) / sizeof(tags[0]))];
		uint32_t len;
		switch (tag) {
		case SL_TAG_FLAGS:
		case SL_TAG_UID:
		case SL_TAG_GID:
		case SL_TAG_PIDS:
			len = rng() % 8 ? 4 : (uint32_t)(rng() % 9);
			break;
		case SL_TAG_SECCOMP:
			len = rng() % 4 ? 8 * (uint32_t)(rng() % 9) : (uint32_t)(rng() % 70);
			break;
		case SL_TAG_SEED:
			len = (uint32_t)(rng() % 80);
			break;
		case SL_TAG_HOSTNAME:
		case SL_TAG_HOME:
		case SL_TAG_WORKDIR:
		case SL_TAG_USER:
			len = (uint32_t)(rng() % 40);
			break;
		default:
			len = rng() % 8 ? 8 : (uint32_t)(rng() % 9);
		}
		buf[n++] = (uint8_t)tag;
		buf[n++] = (uint8_t)(tag >> 8);
		for (int k = 0; k < 4; k++)
			buf[n++] = (uint8_t)(len >> (8 * k));
		int text = tag >= SL_TAG_HOSTNAME && tag <= SL_TAG_USER;
		for (uint32_t k = 0; k < len; k++) {
			if (text)
				buf[n++] = k == 0 && rng() % 2 ? '/' : (uint8_t)alphabet[rng() % (sizeof(alphabet) - 1)];
			else
				buf[n++] = (uint8_t)(rng() % 3 ? rng() % 16 : rng() % 4 ? 0xff : rng());
		}
	}
	if (rng() % 4 == 0 && n < max)
		buf[n++] = (uint8_t)rng(); /* a truncated record */
	return n;
}
