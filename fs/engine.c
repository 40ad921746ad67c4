/* engine.c - the engine's own state E: see engine.h */
#include "engine.h"

struct engine E;
