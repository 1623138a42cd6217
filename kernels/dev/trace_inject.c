/*
 * trace_inject.c — a kernel timeline of any CUDA program, graph replays
 * included, for the GPU machine (which has no Nsight Systems): a CUPTI
 * injection library. The driver loads it when CUDA_INJECTION64_PATH names it
 * and calls InitializeInjection; it turns on CUPTI's concurrent-kernel
 * activity records and, at exit, writes one CSV line a kernel to
 * $TRACE_OUT (default trace.csv): start and end (ns, the GPU's clock),
 * stream, graph node, grid, block and the (mangled) name. What it tells:
 * where each of a step's kernels starts and ends on its stream, so the
 * critical path across the main and side streams and the gaps between
 * nodes can be read (kernels/dev/trace-step.py summarises a window of
 * steps). Each record costs the step a little (CUPTI's tracing), so the
 * timeline is for structure, not for the step's figure.
 *
 * Build (here): cc -shared -fPIC -O2 -I<cuda>/include kernels/dev/trace_inject.c
 *   -L<cuda>/lib64 -lcupti -o .devcarry/lib/libtrace_inject.so (gpu-prepare.sh does).
 * Run: CUDA_INJECTION64_PATH=$PWD/.devcarry/lib/libtrace_inject.so TRACE_OUT=$OUT/t.csv prog ...
 */
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>

#define BUF_BYTES (8u << 20)

static FILE *out;

static void CUPTIAPI buf_requested(uint8_t **buf, size_t *size, size_t *max_records) {
  *buf = (uint8_t *)aligned_alloc(8, BUF_BYTES);
  *size = *buf ? BUF_BYTES : 0;
  *max_records = 0;
}

static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid) {
  (void)ctx, (void)stream, (void)size;
  CUpti_Activity *rec = NULL;
  while (out && cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
    fprintf(out, "%llu,%llu,%u,%u,%llu,%d,%d,%d,%d,%s\n", (unsigned long long)k->start, (unsigned long long)k->end,
            k->streamId, k->graphId, (unsigned long long)k->graphNodeId, k->gridX, k->gridY, k->gridZ, k->blockX,
            k->name ? k->name : "?");
  }
  free(buf);
}

static void flush_at_exit(void) {
  cuptiActivityFlushAll(1);
  if (out) fclose(out), out = NULL;
}

int InitializeInjection(void) {
  const char *path = getenv("TRACE_OUT");
  out = fopen(path && *path ? path : "trace.csv", "w");
  if (!out) return 0;
  fprintf(out, "start,end,stream,graph,node,gx,gy,gz,bx,name\n");
  if (cuptiActivityRegisterCallbacks(buf_requested, buf_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS)
    return 0;
  atexit(flush_at_exit);
  return 1;
}
