/*
 * Unit tests for fs/names.c: a change the daemon planned (a listing, a
 * refresh, a lookup's answer) claims each name it touches, and loses
 * every name a user changed through the mount since the plan began, or
 * is changing now; a user's change waits only for a claim held.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "names.h"
#include "tap.h"

static void user_change(uint64_t dir, const char *name)
{
	struct names_user u;

	names_user_begin(&u, dir, name, 0, NULL);
	names_user_end(&u);
}

static atomic_int user_done;

static void *user_main(void *arg)
{
	(void)arg;
	user_change(7, "held");
	atomic_store(&user_done, 1);
	return NULL;
}

int main(void)
{
	uint64_t p1, p2;
	struct names_user u;
	pthread_t t;

	p1 = names_plan_begin();
	ok(names_claim(1, "a", p1), "a name nobody changed is the plan's");
	names_release(1, "a");
	names_plan_end(p1);

	user_change(1, "before");
	p1 = names_plan_begin();
	ok(names_claim(1, "before", p1), "a change made before the plan does not stop it");
	names_release(1, "before");
	user_change(1, "a");
	ok(!names_claim(1, "a", p1), "a name a user changed since the plan is the user's");
	ok(names_claim(1, "b", p1), "and the plan goes on with the other names");
	names_release(1, "b");
	ok(names_claim(2, "a", p1), "the same name in another directory is another name");
	names_release(2, "a");

	p2 = names_plan_begin();
	ok(names_claim(1, "a", p2), "a plan begun after the change may claim it");
	names_release(1, "a");
	ok(!names_claim(1, "a", p1), "while the older plan still may not");
	names_plan_end(p2);
	names_plan_end(p1);

	p1 = names_plan_begin();
	names_user_begin(&u, 3, "old", 4, "new");
	ok(!names_claim(3, "old", p1) && !names_claim(4, "new", p1),
	   "both names of a rename in flight are refused");
	names_user_end(&u);
	ok(!names_claim(3, "old", p1) && !names_claim(4, "new", p1),
	   "and stay refused once it ended");
	names_plan_end(p1);

	p1 = names_plan_begin();
	ok(names_claim(7, "held", p1), "a claim is held");
	pthread_create(&t, NULL, user_main, NULL);
	usleep(100 * 1000);
	ok(!atomic_load(&user_done), "a user's change of the claimed name waits");
	names_release(7, "held");
	pthread_join(t, NULL);
	ok(atomic_load(&user_done), "and goes on once the claim is released");
	ok(!names_claim(7, "held", p1), "after which the name is the user's");
	names_plan_end(p1);

	user_change(9, "lone");
	p1 = names_plan_begin();
	ok(names_claim(9, "lone", p1), "a change with no plan open leaves nothing behind");
	names_release(9, "lone");
	names_plan_end(p1);
	return tap_done();
}
