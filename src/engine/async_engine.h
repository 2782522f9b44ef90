/*
 * async_engine.h: private hooks of the thread-safe front (async_engine.c)
 * for tests. The public API is in vllm.h ("Thread-safe front").
 */
#ifndef VLLM_ENGINE_ASYNC_ENGINE_H
#define VLLM_ENGINE_ASYNC_ENGINE_H

#include "vllm.h"

/* Makes the engine thread's next step fail with VLLM_ERR_BACKEND (as a
 * failed forward would), to test that every current request then ends
 * with finish_reason abort and an error, and later requests still run. */
void async_engine_fail_next_step(vllm_async_engine *ae);

/* Paused, the engine thread still answers adds but runs no step (and
 * passes no abort to the engine) until unpaused: a deterministic window
 * for tests of timeouts and aborts. */
void async_engine_pause(vllm_async_engine *ae, bool paused);

/* Unpaused, each engine thread runs `steps` more steps (> 0), then pauses
 * itself as async_engine_pause(ae, true) does: a request stopped at a known
 * step whatever the threads' scheduling (a short request cannot finish while
 * the test thread is descheduled). */
void async_engine_pause_after(vllm_async_engine *ae, int steps);

/* Engine steps run so far (read under the engine's lock). */
size_t async_engine_steps(vllm_async_engine *ae);

#endif
