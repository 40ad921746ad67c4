/* state.c - what the engine and the state layer share, S: see state.h */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include "state.h"

struct state S = { .lock = PTHREAD_MUTEX_INITIALIZER };
__thread bool elock_mine;
_Atomic uint32_t events_mask;
