/*
 * pz.cuh — a population's members along the grid's z (docs/population.md,
 * "One launch for every member"). group.cu places member i's device buffers
 * at member 0's plus i x stride bytes, so one launch with z = n block rows
 * runs every member's copy of the same work, each block row on its own
 * member's buffers: pz_at moves a member-0 pointer to its block's member.
 * Pointers read from device memory (problem tables, TMA maps, pack jobs)
 * need no moving: each member built its own, and the pointer to the table is
 * moved. A lone learner is {1, 0}. Moving an argument struct's pointers
 * into a copy: index the copy's arrays only with constants (the argument's
 * own at run time), or the copy lands in local memory (docs/population.md).
 */
#ifndef DQN_CUDA_PZ_CUH
#define DQN_CUDA_PZ_CUH

typedef struct cuda_pz {
  int n;           /* members (grid z) */
  long long stride; /* bytes between one member's buffers and the next's */
} cuda_pz_t;

#ifdef __CUDACC__
/* p of the block's member; NULL stays NULL */
template <typename T> static __device__ __forceinline__ T *pz_at(T *p, long long stride) {
  return p ? (T *)((char *)p + (long long)blockIdx.z * stride) : p;
}
#endif

#endif
