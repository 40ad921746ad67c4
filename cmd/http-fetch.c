/* http-fetch.c - hsmfs-http's fetcher: see http-fetch.h */
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "clock.h"
#include "hsmfs/hook.h"
#include "http-answer.h"
#include "http-chain.h"
#include "http-config.h"
#include "http-fetch.h"
#include "http-list.h"
#include "http-proxy.h"
#include "http-queue.h"
#include "http-xfer.h"
#include "manifest.h"

struct slot slots[MAX_CONNECTIONS];
CURLM *multi;              /* the fetcher's */

/* Start an attempt at s's range. */
static void attempt(struct slot *s)
{
	const struct hsmfs_event *ev = &s->j->ev;
	CURL *c = s->c;

	memset(&s->x, 0, sizeof(s->x));
	s->x.wbuf = s->wbuf;
	s->x.ev = ev;
	s->x.lo = ev->hint_start;
	s->x.hi = ev->hint_end;
	s->x.req_lo = s->x.lo;
	s->x.req_hi = s->x.hi;
	if (cfg.align && !s->is_file) {
		/*
		 * Whole aligned blocks: every host asks a tier the same
		 * ranges.  Only [lo, hi) is written (the rest may be present,
		 * or a user's); the reader goes at FILLED once its bytes are in.
		 */
		s->x.req_lo = s->x.lo / cfg.align * cfg.align;
		s->x.req_hi = (s->x.hi + cfg.align - 1) / cfg.align * cfg.align;
		if (s->x.req_hi > ev->file_size)
			s->x.req_hi = ev->file_size;
	}
	s->x.is_file = s->is_file;
	s->x.received = &s->received;
	s->x.reported = s->reported;
	if (chain) {
		s->proxy = proxy_pick(chain, s->tried, (uint64_t)mono_ms());
		if (s->proxy < 0) {
			s->tried = 0; /* a new round: each member again */
			s->proxy = proxy_pick(chain, 0, (uint64_t)mono_ms());
		}
		use_member(c, s->proxy);
	}
	curl_easy_setopt(c, CURLOPT_URL, s->url);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &s->x);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &s->x);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, &s->x);
	/* every request asks its range: a server's 200 is per response */
	snprintf(s->range, sizeof(s->range), "%llu-%llu",
		 (unsigned long long)s->x.req_lo, (unsigned long long)s->x.req_hi - 1);
	curl_easy_setopt(c, CURLOPT_RANGE, s->range);
	curl_slist_free_all(s->hdrs);
	s->hdrs = NULL;
	if (ev->version[0] && !s->is_file) {
		snprintf(s->ifrange, sizeof(s->ifrange), "If-Range: %s", ev->version);
		s->hdrs = curl_slist_append(s->hdrs, s->ifrange);
	}
	if (!s->is_file)
		s->hdrs = curl_slist_append(s->hdrs, HTTP_IDENTITY);
	if (cfg.aws_sigv4 && !s->is_file)
		s->hdrs = curl_slist_append(s->hdrs, HTTP_S3_EMPTY_PAYLOAD);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, s->hdrs);
	curl_multi_add_handle(multi, c);
}

/*
 * An attempt ended with rc: 0 (allowed: [x.lo, x.hi) filled) or an errno
 * to deny, or -1 when a retry is due at s->retry_at.
 */
static int attempt_done(struct slot *s, CURLcode rc)
{
	const struct hsmfs_event *ev = &s->j->ev;
	struct xfer *x = &s->x;
	long code = 0;

	curl_easy_getinfo(s->c, CURLINFO_RESPONSE_CODE, &code);
	flush_body(x); /* of this attempt: a retry writes its bytes again */
	if (x->io_error) {
		logf_("'%s': writing the store: %s", ev->path, strerror(x->io_error));
		return x->io_error == ENOSPC ? ENOSPC : EIO;
	}
	if (x->checked && x->verdict == HTTP_CHANGED) {
		char p[8300];

		logf_("'%s': origin changed (HTTP %ld: %s); refusing to mix versions",
		      ev->path, code, x->why);
		/* status shows it stale until it is imported again */
		snprintf(p, sizeof(p), "%s/%s", cfg.mountpoint, ev->path);
		setxattr(p, "user.hsmfs.stale", "1", 1, 0);
		return EIO;
	}
	if (x->checked && x->verdict == HTTP_UNPROVEN) {
		logf_("'%s': HTTP %ld does not prove its bytes (%s); refused", ev->path, code,
		      x->why);
		return EIO;
	}
	if (x->cut && rc == CURLE_WRITE_ERROR)
		rc = CURLE_OK; /* stopped on purpose, the range in hand */
	if (chain) {
		bool failed = proxy_failed(s->proxy, rc, code);

		proxy_end(s->proxy, !failed, x->body_pos, x->hit ? x->body_pos : 0, rc, code);
		if (failed) {
			s->tried |= 1ull << s->proxy;
			if (proxy_pick(chain, s->tried, (uint64_t)mono_ms()) >= 0) {
				/* at once through the next member: not a retry */
				s->reported = x->reported;
				s->retry_at = (uint64_t)mono_ms();
				s->failover = true;
				return -1;
			}
			s->tried = 0; /* each member failed it: a retry, as without a chain */
		}
	}
	if (rc != CURLE_OK || code >= 500 || code == 429) {
		if ((transient(rc) || code >= 500 || code == 429) && s->attempt < cfg.retries) {
			unsigned ms = 200u << (s->attempt < 6 ? s->attempt : 6);

			logf_("'%s': %s, retry %u of %u in %u ms", ev->path,
			      rc != CURLE_OK ? curl_easy_strerror(rc) : "server error",
			      s->attempt + 1, cfg.retries, ms);
			s->reported = x->reported;
			s->retry_at = (uint64_t)mono_ms() + ms;
			return -1;
		}
		logf_("'%s': %s (HTTP %ld)", ev->path,
		      rc != CURLE_OK ? curl_easy_strerror(rc) : "server error", code);
		/* a stalled origin (the low-speed limit) is a timeout, not data */
		return rc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT : EIO;
	}
	if (s->is_file && code == 0) {
		/* file:// honours ranges: the body was exactly the range */
	} else if (code == 404 || code == 410) {
		logf_("'%s': missing at origin (HTTP %ld)", ev->path, code);
		return EIO;
	} else if (code == 401 || code == 403) {
		char why[600];

		manifest_s3_error(x->errbody, why, sizeof(why));
		logf_("'%s': origin refused access (HTTP %ld)%s", ev->path, code, why);
		return EACCES;
	} else if (!x->checked || x->verdict != HTTP_KEEP) {
		logf_("'%s': unexpected HTTP %ld", ev->path, code);
		return EIO;
	} else if (code == 200) {
		/* the server ignored Range (the answer was checked): cut */
		static bool said;

		if (!said) {
			said = true;
			logf_("origin of '%s' ignores Range requests (HTTP 200): the range is cut "
			      "out of the whole body; every request still asks for its range",
			      ev->path);
		}
	}
	if (x->overflow || x->filled != x->hi - x->lo ||
	    (!x->cut && x->body_pos != (x->body_len == UINT64_MAX ? ev->file_size : x->body_len))) {
		logf_("'%s': body of %llu bytes does not fill [%llu, %llu)", ev->path,
		      (unsigned long long)x->body_pos, (unsigned long long)x->lo,
		      (unsigned long long)x->hi);
		return EIO;
	}
	return 0;
}

/* Answer s's event (its bytes written: the descriptor is closed first). */
static void slot_end(struct slot *s, int err)
{
	struct job *j = s->j;

	if (j->ev.fd >= 0)
		close(j->ev.fd);
	if (err)
		hsmfs_hook_deny(hook, j->ev.id, err);
	else
		hsmfs_hook_allow(hook, j->ev.id, s->x.lo, s->x.hi, 0);
	curl_slist_free_all(s->hdrs);
	s->hdrs = NULL;
	curl_easy_setopt(s->c, CURLOPT_HTTPHEADER, NULL);
	free(s->url);
	s->url = NULL;
	free(j);
	s->j = NULL;
}

/* Take j into the free slot s and start its first attempt. */
static void slot_begin(struct slot *s, struct job *j)
{
	const struct hsmfs_event *ev = &j->ev;

	s->j = j;
	s->attempt = 0;
	s->received = s->reported = 0;
	s->retry_at = 0;
	s->tried = 0;
	s->failover = false;
	if (ev->fd < 0) {
		slot_end(s, EBADF);
		return;
	}
	s->url = ev->origin[0] ? strdup(ev->origin) :
		 cfg.origin[0] ? join_url(cfg.origin, ev->path) : NULL;
	if (!s->url) {
		logf_("'%s': no url and no origin to fetch it from", ev->path);
		slot_end(s, EIO);
		return;
	}
	s->is_file = !strncmp(s->url, "file:", 5);
	attempt(s);
}

/*
 * The fetcher: takes events, fills free slots from the queue, starts
 * retries that are due, drives the transfers and ends those done; sleeps in
 * curl_multi_poll() until a socket (the hook's too) is ready or a retry
 * is due.  Once the events end it finishes what was queued and returns.
 */
void *fetcher(void *arg)
{
	/* the hook's socket; revents: curl_multi_poll() found it readable
	 * (set at first: events may be waiting already) */
	struct curl_waitfd hw = { .fd = hsmfs_hook_fd(hook), .events = CURL_WAIT_POLLIN,
				  .revents = CURL_WAIT_POLLIN };

	(void)arg;
	for (;;) {
		uint64_t now = (uint64_t)mono_ms(), next = 0;
		bool busy = false, again = false, quit;
		unsigned nlater = 0;
		struct CURLMsg *m;
		int running, left;

		if (hw.revents) {
			hw.revents = 0; /* curl_multi_poll() keeps it when nothing was ready */
			take_events();
		}
		send_stats();
		for (unsigned i = 0; i < cfg.connections; i++)
			nlater += slots[i].j && slots[i].later;
		for (unsigned i = 0; i < cfg.connections; i++) {
			struct slot *s = &slots[i];

			if (!s->j) {
				/* a job that ends at once (no URL) leaves it free */
				for (;;) {
					struct job *j;
					bool l = false;

					pthread_mutex_lock(&qlock);
					j = jobq_take(&fills);
					if (!j && (cfg.connections == 1 ||
						   nlater + 1 < cfg.connections)) {
						j = jobq_take(&later);
						l = j != NULL;
					}
					pthread_mutex_unlock(&qlock);
					if (!j)
						break;
					s->later = l;
					slot_begin(s, j);
					if (s->j) {
						nlater += l;
						break;
					}
				}
			} else if (s->retry_at && s->retry_at <= now) {
				s->retry_at = 0;
				s->attempt += !s->failover;
				s->failover = false;
				attempt(s);
			}
			if (s->retry_at && (!next || s->retry_at < next))
				next = s->retry_at;
			busy |= s->j != NULL;
		}
		curl_multi_perform(multi, &running);
		while ((m = curl_multi_info_read(multi, &left))) {
			struct slot *s = NULL;
			CURL *c = m->easy_handle;
			CURLcode rc = m->data.result;
			int err;

			if (m->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(c, CURLINFO_PRIVATE, (char **)&s);
			curl_multi_remove_handle(multi, c); /* m is gone from here */
			err = attempt_done(s, rc);
			if (err >= 0) {
				slot_end(s, err);
				again = true; /* a slot is free: the queue may fill it */
			} else if (!next || s->retry_at < next) {
				next = s->retry_at;
			}
		}
		pthread_mutex_lock(&qlock);
		quit = done && !fills.head && !later.head;
		pthread_mutex_unlock(&qlock);
		if (quit && !busy && !again)
			break;
		if (again)
			continue;
		now = (uint64_t)mono_ms();
		curl_multi_poll(multi, &hw, done ? 0 : 1,
				!next ? 1000 : next <= now ? 0 :
				next - now < 1000 ? (int)(next - now) : 1000,
				NULL);
	}
	return NULL;
}
