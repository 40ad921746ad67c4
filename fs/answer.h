/*
 * answer.h - what hooks say to the engine (answer.c), called by hooks.c
 * from connection threads, without S.lock.
 */
#ifndef HSMFS_ANSWER_H
#define HSMFS_ANSWER_H

#include <stdint.h>
#include "proto.h"

struct hook;

/* h said HELLO: send it welcome (len bytes) and add it, atomically.  0 or -errno. */
int events_hook_joined(struct hook *h, const uint8_t *welcome, int len);
void events_hook_left(struct hook *h);
void events_answer(struct hook *h, const struct proto_answer *a);
void events_progress(struct hook *h, const struct proto_progress *p);
void events_filled(struct hook *h, const struct proto_filled *f);
void events_archived(struct hook *h, const struct proto_archived *a);

#endif
