/* Fuzz entry point for the DNS query parser and reply builder
 * (src/net/wire.c), the bytes a sandbox sends to port 53.  Oracles: a
 * parsed query points only inside the input; its name is clean; a reply
 * always fits 512 bytes, echoes the id and question, and reads back as a
 * response with the counts it was built with. */
#include <stdint.h>
#include <string.h>

#include "net_check.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sl_dns_query q;
	int st = sl_dns_parse_query(data, size, &q);
	if (st == SL_DNS_DROP)
		return 0;
	check(size >= SL_DNS_HEADER);
	if (st == SL_DNS_ERROR)
		check(q.rcode == SL_DNS_RCODE_FORMERR || q.rcode == SL_DNS_RCODE_NOTIMP);
	if (st == SL_DNS_OK) {
		check(q.question == data + SL_DNS_HEADER);
		check(q.question_len >= 5 && SL_DNS_HEADER + q.question_len <= size);
		check(q.question_len <= 255 + 4 + 1);
		if (q.name_status == SL_NAME_OK)
			check_name(q.name);
		else
			check(q.name[0] == '\0');
	}
	uint32_t addrs[SL_DNS_MAX_ADDRS + 2];
	for (size_t i = 0; i < SL_DNS_MAX_ADDRS + 2; i++)
		addrs[i] = (uint32_t)(0x0a000001u + i);
	size_t na = size % (SL_DNS_MAX_ADDRS + 3);
	uint8_t out[SL_DNS_UDP_MAX];
	size_t n = sl_dns_build_reply(out, sizeof(out), &q, SL_DNS_RCODE_NOERROR, addrs, na, 60);
	check(n >= SL_DNS_HEADER && n <= SL_DNS_UDP_MAX);
	check(out[0] == data[0] && out[1] == data[1]);
	check(out[2] & 0x80); /* a response */
	if (q.question_len) {
		check(memcmp(out + SL_DNS_HEADER, q.question, q.question_len) == 0);
		size_t want = na > SL_DNS_MAX_ADDRS ? SL_DNS_MAX_ADDRS : na;
		check(((out[6] << 8) | out[7]) == (int)want);
		check(n == SL_DNS_HEADER + q.question_len + want * 16);
	}
	/* A reply is never taken for a query. */
	struct sl_dns_query r;
	check(sl_dns_parse_query(out, n, &r) == SL_DNS_DROP);
	return 0;
}
