#define _GNU_SOURCE /* pthread_setname_np */
#include "thread_name.h"

#include <pthread.h>
#include <stdio.h>

void rt_thread_name(const char *name) {
  char cut[16];
  snprintf(cut, sizeof cut, "%s", name);
  (void)pthread_setname_np(pthread_self(), cut);
}
