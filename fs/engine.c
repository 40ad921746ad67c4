/* engine.c - the engine's shared state E: see engine.h */
#include <pthread.h>
#include <stdbool.h>
#include "engine.h"

struct engine E = { .lock = PTHREAD_MUTEX_INITIALIZER };
__thread bool elock_mine;
