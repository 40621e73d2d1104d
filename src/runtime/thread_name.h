/*
 * Names capstore's threads ("cs-capture", "cs-writer", ...) so that `top -H`,
 * `ps -L`, perf and /proc/PID/task/TID/comm tell them from the model's own
 * threads: an operator sees at a glance what capture costs. Best effort.
 */
#ifndef CAPSTORE_RUNTIME_THREAD_NAME_H
#define CAPSTORE_RUNTIME_THREAD_NAME_H

/* Names the calling thread; NAME is cut to 15 bytes (the kernel's limit). */
void rt_thread_name(const char *name);

#endif
