/*
 * serve.c - the daemon's last stage (daemon.h): the engine and its
 * helpers started, what a daemon taking over finds left, the session's
 * loop until the mount ends; and their stop.
 */
#include <errno.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "answer.h"
#include "archive.h"
#include "bdi.h"
#include "cache.h"
#include "change.h"
#include "check.h"
#include "clock.h"
#include "daemon.h"
#include "dirs.h"
#include "events.h"
#include "evict.h"
#include "fan-ctl.h"
#include "fan.h"
#include "fan-kernel.h"
#include "fan-marks.h"
#include "inode.h"
#include "fault.h"
#include "hooks.h"
#include "log.h"
#include "meta.h"
#include "ops-adopt.h"
#include "ops-io.h"
#include "passthrough.h"
#include "prefetch.h"
#include "ready.h"
#include "saved.h"
#include "supervise.h"
#include "writeback.h"

static pthread_t main_thread;
static atomic_bool hook_refused;

/*
 * The supervised hook refused the mount before it was ready (supervise.h):
 * the daemon ends as on SIGTERM, sent to the thread that runs the loop
 * (libfuse's workers block signals; its wait there is interruptible).
 */
static void end_refused(void)
{
	atomic_store(&hook_refused, true);
	pthread_kill(main_thread, SIGTERM);
}

/* The hook transport hands what hooks say to the engine (answer.h). */
static const struct hooks_handlers engine_answers = {
	.joined = events_hook_joined,
	.left = events_hook_left,
	.answer = events_answer,
	.progress = events_progress,
	.filled = events_filled,
	.archived = events_archived,
};

/* Listings at once of the walk at mount (the hook's own bound still holds). */
#define WALK_LISTERS 8

/* The walk's progress, each few seconds, and whether to go on (no signal). */
static bool walk_progress(unsigned long listed, unsigned long left)
{
	static int64_t said;
	int64_t now = mono_ms();

	if (!said)
		said = now;
	if (now - said >= 2000) {
		said = now;
		ready_note("listing the tree from the origin: %lu director%s listed, %lu to look at",
			   listed, listed == 1 ? "y" : "ies", left);
	}
	return !fan_signalled();
}

/*
 * backend=fanotify, a new mount: no event lists a directory, so the
 * directories not listed yet are listed now, through the hooks, before
 * users see the tree; then every file with bytes missing is marked and
 * the store bound at the mountpoint (a mark counts for the opens made
 * after it).  The hooks were started with the store as their mountpoint
 * (the bind is not there yet).
 */
static bool fan_tree_run(struct daemon *d)
{
	char err[512], why[PATH_MAX + 256];
	unsigned long unlisted = 0, listed = 0, failures = 0;
	long n;
	int res;

	n = fan_count_unlisted(d->meta, &unlisted);
	if (n >= 0 && unlisted && d->o.hook) {
		int64_t t0 = mono_ms();

		/* the lister: the supervised hook, once it joined (or refused) */
		if (ready_wait_hook() < 0) {
			d->rc = EXIT_HOOK;
			return false;
		}
		/* a listing is a round trip to the origin: several at once */
		res = events_list_tree(inode_root(), WALK_LISTERS, d->o.background, walk_progress,
				       &listed, &failures, err, sizeof(err));
		if (res == -EINTR) {
			/* a signal, or the hook refused the mount (end_refused()) */
			log_info("backend=fanotify: stopped while the tree was listed");
			d->rc = atomic_load(&hook_refused) ? EXIT_HOOK : 0;
			return false;
		}
		if (res && !d->o.background) {
			snprintf(why, sizeof(why), "backend=fanotify: cannot list '%s' from the origin "
				 "(%s): the mount needs its tree first; nocheck_origin mounts without it",
				 err, strerror(-res));
			log_err("%s", why);
			ready_fail(why);
			d->rc = EXIT_HOOK;
			return false;
		}
		if (res)
			ready_warn("backend=fanotify: cannot list %lu director%s from the origin (the "
				   "first, '%s': %s): their names and those below them are missing on "
				   "this mount; it lists them again at its next start", failures,
				   failures == 1 ? "y" : "ies", err, strerror(-res));
		if (listed)
			ready_note("listed %lu director%s from the origin in %.1f s", listed,
				   listed == 1 ? "y" : "ies", (double)(mono_ms() - t0) / 1000);
	}
	if (n >= 0)
		n = fan_mark_missing(d->meta, d->o.thin, &unlisted);
	if (n < 0) {
		snprintf(why, sizeof(why), "backend=fanotify: cannot mark the files not all "
			 "present: %s", strerror((int)-n));
		log_err("%s", why);
		ready_fail(why);
		d->rc = EXIT_MOUNT;
		return false;
	}
	log_debug("backend=fanotify: %ld files marked", n);
	if (unlisted)
		log_warn("backend=fanotify: directories not listed yet show no names on this mount "
			 "(no event lists them; %lu of them): mount with hook= and an origin, or "
			 "list them first with hsmfsctl import -s STORE --listing URL", unlisted);
	res = fan_mount(d->store_path, d->mnt_path, d->o.read_only, err, sizeof(err));
	if (res) {
		log_err("%s", err);
		ready_fail(err);
		d->rc = EXIT_MOUNT;
		return false;
	}
	return true;
}

/* The engine and its helpers, a takeover's leftovers, then the session's loop. */
bool serve_run(struct daemon *d)
{
	struct fuse_loop_config *lcfg;
	int res;

	if (!d->takeover && !d->o.fanotify) {
		res = ops_io_attach(d->se, fuse_session_fd(d->se), false);
		if (res) {
			log_err("cannot serve the mount: %s", strerror(-res));
			d->rc = EXIT_SERVE;
			goto fail;
		}
	}
	d->serving = true;
	/* the process that holds the mount: the keeper, when there is one */
	store_write_pid(&d->store, d->kept ? getppid() : getpid());
	/* with hook=, ready once the hook joined too (ready.h) */
	ready_init(d->o.ready_fd, d->daemon_fd, d->o.hook != NULL, d->o.timeout);
	if (!d->o.fanotify) {
		ops_init(&d->ocfg);
		ops_set_session(d->se);
	}
	{
		struct events_config ecfg = {
			.max_pending = d->o.max_pending,
			.seq_base = saved_head()->restarts << 28,
			.takeover = d->takeover,
			.timeout = d->o.timeout,
			.progress_floor = d->o.progress_floor,
			.nohook_fail = d->o.nohook_fail,
			.chunk = d->o.chunk,
			.first_fill = d->o.first_fill,
			/* the window the kernel reads ahead in (bdi.h) */
			.kernel_ra = d->o.readahead ? d->o.readahead : 128 << 10,
			.dir_ttl = d->o.dir_ttl,
			.writeback_on = d->o.archive_after >= 0,
			.writeback = d->o.archive_after,
			/*
			 * a mount with an origin archives what is made on it (not
			 * seen yet on backend=fanotify: hsmfs(8) FANOTIFY BACKEND)
			 */
			.track_new = !d->o.fanotify && (d->o.origin != NULL || d->o.archive_after >= 0),
			.meta = d->meta,
			.store_path = d->store_path,
			.origin = d->o.origin,
			.front = {
				.reply = ops_read_reply,
				.caller = ops_caller,
				.interrupted = ops_interrupted,
				.may_archive = ops_may_archive,
				.exiting = ops_exiting,
				.invalidate = ops_invalidate_front,
				.subscriptions_changed = pt_subscriptions_changed,
			},
			/* on a shared mount one user gets a quarter of the places */
			.max_parked_user = d->o.max_pending_user ? d->o.max_pending_user :
					   d->o.allow_other ? (d->o.max_pending + 3) / 4 : 0,
			.state_fd = d->store.state_fd,
			.cache_limited = d->o.cache_max || d->o.cache_min_free ||
					 d->o.cache_min_free_pct,
			.keep_blocks = d->o.fanotify && !d->o.thin,
		};
		struct cache_config ccfg = {
			.max = d->o.cache_max,
			.min_free = d->o.cache_min_free,
			.min_free_pct = d->o.cache_min_free_pct,
			.chunk = d->o.chunk,
			.store_fd = d->store.root_fd,
			.state_fd = d->store.state_fd,
			.meta = d->meta,
			.on = { .sync = writeback_sync, .evict = evict_victim,
				/* write-back on: changed files make room too */
				.archive = d->o.archive_after >= 0 ? archive_pressure : NULL },
		};
		char state_path[PATH_MAX + 16];

		if (d->o.fanotify)
			ecfg.front = fan_front;
		res = events_init(&ecfg);
		if (!res) {
			res = cache_init(&ccfg);
			d->cache_up = !res;
		}
		if (!res) {
			d->events_up = true;
			snprintf(state_path, sizeof(state_path), "%s/%s",
				 d->store_path, STORE_STATE_DIR);
			/* the kernel raises no such event before a change or an open */
			if (d->o.fanotify)
				hooks_refuse(HSMFS_MASK(HSMFS_EV_PRE_MODIFY) |
					     HSMFS_MASK(HSMFS_EV_OPEN_PERM) |
					     HSMFS_MASK(HSMFS_EV_ACCESS_PERM));
			res = hooks_start(d->store.state_fd, state_path, d->o.chunk,
					  (uint32_t)(d->o.timeout * 1000), &engine_answers);
			d->hooks_up = !res;
		}
		/* sibling prefetch follows FUSE opens */
		if (!res && !d->o.fanotify)
			res = prefetch_init(d->o.prefetch);
		if (res) {
			log_err("cannot start the event engine: %s", strerror(-res));
			d->rc = EXIT_SERVE;
			goto fail;
		}
	}
	if (d->takeover) {
		/*
		 * The removals the last daemon made and did not record, first:
		 * a claim of a file removed since is then of no row, and not
		 * made again.
		 */
		unsigned n = ops_resend_removals();

		if (n)
			log_info("recorded %u removal%s the last daemon made in the store", n,
				 n == 1 ? "" : "s");
	}
	if (d->takeover) {
		/*
		 * The user's changes the last daemon answered and never
		 * committed, committed now: before the check below compares
		 * the rows with the store, and before any read may fill.
		 */
		unsigned n = events_replay_claims();

		if (n) {
			writeback_sync();
			log_info("took over %u change%s not yet recorded", n, n == 1 ? "" : "s");
		}
	}
	if (!d->was_clean) {
		uint64_t rows = 0;

		uint64_t *keep = NULL;
		size_t nkeep = d->takeover ? ops_resend_removals_begun(&keep) : 0;

		if (!meta_count(d->meta, &rows) && rows &&
		    check_start(d->store.root_fd, d->meta, keep, nkeep))
			log_warn("cannot start the consistency check, ignoring");
		free(keep);
	}
	/*
	 * hsmfsctl's requests (fan-ctl.h), before the hook, which asks its
	 * origin that way: a mount without them still serves
	 */
	if (d->o.fanotify && (res = fan_ctl_start(d->store.state_fd)))
		log_warn("backend=fanotify: no control socket, hsmfsctl cannot ask this "
			 "daemon: %s", strerror(-res));
	if (d->o.hook) {
		/*
		 * A new mount whose root was never listed asks its hook whether
		 * it can serve it: a wrong origin fails the mount in one line,
		 * not every later look with EIO; with nofail or _netdev it is
		 * retried in the background instead.
		 */
		main_thread = pthread_self();
		res = supervise_start(d->o.hook,
				      /* a fanotify mount is bound after the walk (fan_tree_run()): its store */
				      d->o.fanotify ? d->store_path : d->mnt_path,
				      !d->takeover && !d->o.background && dirs_root_unlisted(),
				      end_refused);
		if (res) {
			log_err("cannot supervise hook '%s': %s", d->o.hook, strerror(-res));
			d->rc = EXIT_SERVE;
			goto fail;
		}
		d->hook_up = true;
	}

	if (d->o.fanotify) {
		if (!d->takeover && !fan_tree_run(d))
			goto fail;
		res = fan_start(d->o.chunk, !d->o.thin, d->takeover);
		if (res) {
			log_err("cannot serve the mount: %s", strerror(-res));
			d->rc = EXIT_SERVE;
			goto fail;
		}
		ready_live();
		res = fan_serve();
		fan_ctl_stop(); /* before the engine's shutdown, which its requests call */
		if (res == FAN_HANDOVER) {
			/*
			 * hsmfsctl restart: what the writer holds is committed,
			 * the rest is left as a crash leaves it (the events read
			 * are recorded) for the next daemon (keeper.h)
			 */
			writeback_sync();
			log_info("handing over to the next daemon");
			_exit(KEEPER_HANDOVER);
		}
		if (atomic_load(&hook_refused)) {
			d->rc = EXIT_HOOK;
		} else if (res < 0) {
			log_err("serving failed: %s", strerror(-res));
			d->rc = EXIT_SERVE;
		}
		return true;
	}
	if (d->o.readahead && bdi_readahead_start(d->mnt_path, d->o.readahead))
		log_warn("cannot start setting readahead=, ignoring");
	if (d->takeover) {
		ops_adopt_opens();
		fault_named(FAULT_TAKE_ADOPTED);
	}

	if (d->o.single_thread) {
		res = fuse_session_loop(d->se);
	} else {
		lcfg = fuse_loop_cfg_create();
		if (!lcfg) {
			log_err("out of memory");
			res = -ENOMEM;
		} else {
			if (d->o.max_threads)
				fuse_loop_cfg_set_max_threads(lcfg, d->o.max_threads);
			res = fuse_session_loop_mt(d->se, lcfg);
			fuse_loop_cfg_destroy(lcfg);
		}
	}
	if (atomic_load(&hook_refused)) {
		d->rc = EXIT_HOOK; /* said: supervise.c logged it, ready.c told the parent */
	} else if (res < 0) {
		log_err("serving failed: %s", strerror(-res));
		d->rc = EXIT_SERVE;
	}
	if (d->kept && ops_handover_asked()) {
		/*
		 * hsmfsctl restart: what the writer holds is committed, the rest
		 * is left as a crash leaves it, for the next daemon (keeper.h):
		 * requests parked on hooks are the kernel's to send again.
		 */
		writeback_sync();
		log_info("handing over to the next daemon");
		_exit(KEEPER_HANDOVER);
	}
	return true;
fail:
	serve_undo(d);
	return false;
}

/* The threads that act on the mount end after it: mount_undo(). */
void serve_undo(struct daemon *d)
{
	fan_ctl_stop(); /* a start that failed after it */
	prefetch_shutdown(); /* before the engine: it starts fills */
	/* the uploads under way finish while their hooks are still there */
	if (d->events_up)
		archive_shutdown();
	if (d->hook_up)
		supervise_stop();
	ready_shutdown(); /* after the hook's last word: it may join late */
	if (d->hooks_up)
		hooks_stop();
	check_stop();
	if (d->cache_up)
		cache_shutdown();
	if (d->events_up) {
		events_shutdown();
		if ((d->rc == 0 || d->rc == EXIT_HOOK) && d->serving)
			check_mark_clean(d->store.state_fd);
	}
}
