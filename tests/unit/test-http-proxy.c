/* test-http-proxy: hsmfs-http's chain of proxies, its syntax and failover */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../cmd/http-proxy.h"
#include "tap.h"

#define SKIP 1000
#define RESET 10000

static struct proxy_chain *chain(const char *spec, const char *host)
{
	char err[200];
	struct proxy_chain *pc = proxy_chain_new(spec, host, SKIP, RESET, err, sizeof(err));

	if (!pc)
		printf("# %s\n", err);
	return pc;
}

static const char *pick(struct proxy_chain *pc, uint64_t tried, uint64_t now)
{
	int i = proxy_pick(pc, tried, now);

	return i < 0 ? "(none)" : proxy_url(pc, i)[0] ? proxy_url(pc, i) : "DIRECT";
}

static int index_of(struct proxy_chain *pc, const char *url)
{
	for (unsigned i = 0; i < proxy_count(pc); i++)
		if (!strcmp(proxy_url(pc, (int)i), strcmp(url, "DIRECT") ? url : ""))
			return (int)i;
	return -1;
}

int main(void)
{
	char err[200];
	struct proxy_chain *pc;
	struct proxy_stat st[8];
	unsigned counts[2] = { 0, 0 };

	/* the syntax */
	ok(!proxy_chain_new("", "h", SKIP, RESET, err, sizeof(err)), "empty: refused (%s)", err);
	ok(!proxy_chain_new("http://a|", "h", SKIP, RESET, err, sizeof(err)),
	   "an empty member: refused (%s)", err);
	ok(!proxy_chain_new("http://a;;DIRECT", "h", SKIP, RESET, err, sizeof(err)),
	   "an empty group: refused");
	ok(!proxy_chain_new("http://a b", "h", SKIP, RESET, err, sizeof(err)),
	   "a space: refused (%s)", err);
	pc = chain("http://a:3128", "h");
	ok(pc && proxy_count(pc) == 1 && !strcmp(pick(pc, 0, 1), "http://a:3128"),
	   "one proxy: the chain of one");
	proxy_done(pc, 0, false, 0, 0, 1);
	ok(!strcmp(pick(pc, 0, 2), "http://a:3128"), "every member skipped: tried anyway");
	ok(!strcmp(pick(pc, 1, 2), "(none)"), "each member failed this request: none left");
	proxy_chain_free(pc);

	/* failover between groups, and back */
	pc = chain("http://a;http://b;DIRECT", "h");
	ok(pc && proxy_count(pc) == 3, "three groups");
	ok(!strcmp(pick(pc, 0, 100), "http://a"), "the first group first");
	proxy_done(pc, 0, false, 0, 0, 100);
	ok(!strcmp(pick(pc, 1, 100), "http://b"), "a failed: the request goes to b");
	proxy_done(pc, 1, true, 10, 0, 100);
	ok(!strcmp(pick(pc, 0, 200), "http://b"), "and the next request too (a skipped)");
	proxy_done(pc, 1, false, 0, 0, 200);
	ok(!strcmp(pick(pc, 2, 200), "DIRECT"), "b failed as well: DIRECT");
	ok(!strcmp(pick(pc, 7, 200), "(none)"), "all three failed the request: it fails");
	proxy_done(pc, 2, true, 0, 0, 200);
	ok(!strcmp(pick(pc, 0, 300), "DIRECT"), "the chain stays on DIRECT while a and b are skipped");
	ok(!strcmp(pick(pc, 0, 100 + SKIP + 1), "DIRECT"),
	   "a's skip over, but the chain stays on the group in use until the reset");
	ok(!strcmp(pick(pc, 0, 100 + RESET), "http://a"), "reset_ms after leaving: the first group again");
	proxy_stats(pc, st, 8, 100 + RESET);
	ok(st[0].current && !st[1].current && st[1].failures == 1 && st[1].requests == 2 &&
		   st[1].bytes == 10 && !strcmp(st[2].url, "DIRECT") && st[0].switches == 3,
	   "the stats: the group in use, each member's requests, failures and bytes "
	   "(switches %llu)", (unsigned long long)st[0].switches);
	proxy_chain_free(pc);

	/* a skipped member of the group in use is passed over, not the group */
	pc = chain("http://a|http://b;DIRECT", "host1");
	{
		int first = proxy_pick(pc, 0, 1), other = first == 0 ? 1 : 0;

		ok(first == 0 || first == 1, "a member of the first group");
		ok(proxy_pick(pc, 0, 2) == first && proxy_pick(pc, 0, 3) == first,
		   "one host keeps to one member");
		proxy_done(pc, first, false, 0, 0, 4);
		ok(proxy_pick(pc, 0, 5) == other, "it failed: the other member of the group");
		proxy_done(pc, other, false, 0, 0, 5);
		ok(!strcmp(pick(pc, 0, 6), "DIRECT"), "both failed: the next group");
		proxy_done(pc, first, true, 0, 0, 7);
		ok(proxy_pick(pc, 0, 8) == first,
		   "a request that got through the first group brings the chain back to it");
	}
	proxy_chain_free(pc);

	/* the balance: hosts spread over a group's members */
	for (int h = 0; h < 200; h++) {
		char host[32];

		snprintf(host, sizeof(host), "node%03d.example", h);
		pc = chain("http://p1:3128|http://p2:3128", host);
		counts[proxy_pick(pc, 0, 1)]++;
		proxy_chain_free(pc);
	}
	ok(counts[0] > 70 && counts[1] > 70, "200 hosts spread over two members: %u and %u",
	   counts[0], counts[1]);

	/* a member's hosts spread over the rest when it fails, the others stay */
	{
		unsigned stay = 0, moved[3] = { 0, 0, 0 };

		for (int h = 0; h < 300; h++) {
			char host[32];
			int a, b;

			snprintf(host, sizeof(host), "n%d", h);
			pc = chain("http://x|http://y|http://z", host);
			a = proxy_pick(pc, 0, 1);
			proxy_done(pc, index_of(pc, "http://x"), false, 0, 0, 1);
			b = proxy_pick(pc, 0, 2);
			if (a != 0)
				stay += a == b;
			else
				moved[b]++;
			proxy_chain_free(pc);
		}
		ok(moved[0] == 0 && moved[1] > 20 && moved[2] > 20,
		   "x's hosts moved to y (%u) and z (%u)", moved[1], moved[2]);
		ok(stay > 150, "the other hosts kept their member (%u)", stay);
	}
	return tap_done();
}
