#include "common/rtnl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include <linux/netlink.h>
#include <linux/rtnetlink.h>

struct nlreq {
	struct nlmsghdr h;
	union {
		struct ifaddrmsg ifa;
		struct rtmsg rt;
	};
	char attrs[64];
};

static void add_attr(struct nlreq *r, unsigned short type, const void *data, unsigned short len)
{
	struct rtattr *a = (struct rtattr *)((char *)r + NLMSG_ALIGN(r->h.nlmsg_len));
	a->rta_type = type;
	a->rta_len = (unsigned short)RTA_LENGTH(len);
	memcpy(RTA_DATA(a), data, len);
	r->h.nlmsg_len = NLMSG_ALIGN(r->h.nlmsg_len) + RTA_ALIGN(a->rta_len);
}

/* Send one request and read its acknowledgement; EEXIST counts as done
 * (the calls are idempotent). */
static int talk(int fd, struct nlreq *r)
{
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	if (sendto(fd, r, r->h.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
		return -1;
	char buf[1024];
	ssize_t n;
	do
		n = recv(fd, buf, sizeof(buf), 0);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	struct nlmsghdr *h = (struct nlmsghdr *)buf;
	if (!NLMSG_OK(h, (unsigned)n) || h->nlmsg_type != NLMSG_ERROR) {
		errno = EPROTO;
		return -1;
	}
	struct nlmsgerr *e = NLMSG_DATA(h);
	if (e->error && e->error != -EEXIST) {
		errno = -e->error;
		return -1;
	}
	return 0;
}

int sandlot__rtnl_add_addr(int fd, int index, uint32_t addr, unsigned prefix)
{
	uint32_t a = htonl(addr);
	struct nlreq r;
	memset(&r, 0, sizeof(r));
	r.h.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifaddrmsg));
	r.h.nlmsg_type = RTM_NEWADDR;
	r.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
	r.ifa.ifa_family = AF_INET;
	r.ifa.ifa_prefixlen = (unsigned char)prefix;
	r.ifa.ifa_scope = RT_SCOPE_UNIVERSE;
	r.ifa.ifa_index = (unsigned)index;
	add_attr(&r, IFA_LOCAL, &a, 4);
	add_attr(&r, IFA_ADDRESS, &a, 4);
	return talk(fd, &r);
}

int sandlot__rtnl_add_default_route(int fd, int index, uint32_t gateway, uint32_t src)
{
	uint32_t gw = htonl(gateway), s = htonl(src);
	struct nlreq r;
	memset(&r, 0, sizeof(r));
	r.h.nlmsg_len = NLMSG_LENGTH(sizeof(struct rtmsg));
	r.h.nlmsg_type = RTM_NEWROUTE;
	r.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
	r.rt.rtm_family = AF_INET;
	r.rt.rtm_table = RT_TABLE_MAIN;
	r.rt.rtm_protocol = RTPROT_BOOT;
	r.rt.rtm_scope = gateway ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK;
	r.rt.rtm_type = RTN_UNICAST;
	if (gateway)
		add_attr(&r, RTA_GATEWAY, &gw, 4);
	add_attr(&r, RTA_OIF, &index, 4);
	if (src)
		add_attr(&r, RTA_PREFSRC, &s, 4);
	return talk(fd, &r);
}
