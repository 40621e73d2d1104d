/*
 * The CUDA adapter of the capture sink: pinned host memory, events and the
 * asynchronous device-to-host copy. Built against the CUDA runtime API when
 * CMake finds the toolkit (CAPSTORE_HAVE_CUDA); otherwise every entry point
 * answers CS_E_UNSUPPORTED. No GPU is needed to build either half.
 *
 * Which stream the copy goes on. The copy is enqueued on the caller's
 * stream, then an event is recorded there:
 *   - it reads the tensor in stream order: after the kernels that produced
 *     it, and before any later kernel on that stream (or a stream-ordered
 *     free and reuse by the caching allocator) can change it;
 *   - the model's stream waits only for the copy itself (it runs on a copy
 *     engine, not on the SMs); the host thread never waits;
 *   - the worker thread waits on the event, never the model.
 * The alternative, a private copy stream that waits on an event recorded
 * on the caller's stream (cudaStreamWaitEvent), keeps the model's stream
 * entirely free, but then nothing orders the copy before the model's next
 * writes to the same memory: the caller would have to keep the tensor
 * unchanged until the copy completes, which a hook cannot promise. So the
 * copy stays on the caller's stream. An adapter never retries: errors are
 * classified and returned with the runtime's error string.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../runtime/runtime_internal.h"

#if defined(CAPSTORE_HAVE_CUDA) && CAPSTORE_HAVE_CUDA

#include <cuda_runtime_api.h>

static int cuda_refuse(cudaError_t status, const char *call, char *msg, size_t msg_size) {
  (void)cudaGetLastError(); /* clear a sticky non-fatal error so the next call starts clean */
  return rt_refuse(CS_E_IO, msg, msg_size, "%s: %s (%s)", call, cudaGetErrorString(status),
                cudaGetErrorName(status));
}

int rt_cuda_probe(char *msg, size_t msg_size) {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return rt_refuse(CS_E_UNSUPPORTED, msg, msg_size, "no usable CUDA device: %s",
                  cudaGetErrorString(status));
  }
  if (count == 0) return rt_refuse(CS_E_UNSUPPORTED, msg, msg_size, "no CUDA device");
  return CS_E_OK;
}

int rt_cuda_host_alloc(size_t size, void **out, char *msg, size_t msg_size) {
  cudaError_t status = cudaHostAlloc(out, size, cudaHostAllocDefault);
  if (status != cudaSuccess) return cuda_refuse(status, "cudaHostAlloc", msg, msg_size);
  return CS_E_OK;
}

void rt_cuda_host_free(void *ptr) { (void)cudaFreeHost(ptr); }

int rt_cuda_event_create(void **out, char *msg, size_t msg_size) {
  cudaEvent_t event = NULL;
  cudaError_t status = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (status != cudaSuccess) return cuda_refuse(status, "cudaEventCreateWithFlags", msg, msg_size);
  *out = event;
  return CS_E_OK;
}

void rt_cuda_event_destroy(void *event) { (void)cudaEventDestroy((cudaEvent_t)event); }

int rt_cuda_copy_d2h(void *dst, const void *src, size_t length, void *stream, void *event,
                     char *msg, size_t msg_size) {
  cudaError_t status = cudaMemcpyAsync(dst, src, length, cudaMemcpyDeviceToHost, (cudaStream_t)stream);
  if (status != cudaSuccess) return cuda_refuse(status, "cudaMemcpyAsync", msg, msg_size);
  status = cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream);
  if (status != cudaSuccess) return cuda_refuse(status, "cudaEventRecord", msg, msg_size);
  return CS_E_OK;
}

int rt_cuda_event_wait(void *event, char *msg, size_t msg_size) {
  cudaError_t status = cudaEventSynchronize((cudaEvent_t)event);
  if (status != cudaSuccess) return cuda_refuse(status, "cudaEventSynchronize", msg, msg_size);
  return CS_E_OK;
}

#else /* built without the CUDA toolkit */

int rt_cuda_probe(char *msg, size_t msg_size) {
  return rt_refuse(CS_E_UNSUPPORTED, msg, msg_size, "capstore was built without CUDA");
}

int rt_cuda_host_alloc(size_t size, void **out, char *msg, size_t msg_size) {
  (void)size;
  *out = NULL;
  return rt_cuda_probe(msg, msg_size);
}

void rt_cuda_host_free(void *ptr) { (void)ptr; }

int rt_cuda_event_create(void **out, char *msg, size_t msg_size) {
  *out = NULL;
  return rt_cuda_probe(msg, msg_size);
}

void rt_cuda_event_destroy(void *event) { (void)event; }

int rt_cuda_copy_d2h(void *dst, const void *src, size_t length, void *stream, void *event,
                     char *msg, size_t msg_size) {
  (void)dst, (void)src, (void)length, (void)stream, (void)event;
  return rt_cuda_probe(msg, msg_size);
}

int rt_cuda_event_wait(void *event, char *msg, size_t msg_size) {
  (void)event;
  return rt_cuda_probe(msg, msg_size);
}

#endif
