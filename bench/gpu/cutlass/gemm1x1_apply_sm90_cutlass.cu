/* gemm1x1_apply_sm90_cutlass.cu — gemm1x1_stats_sm90_cutlass's probe built
 * with only the columns the shared-memory apply is judged by (cuBLASLt,
 * CUTLASS plain, smem apply, the statistics pass): the full probe's one TU
 * holds 50 GEMM kernels and takes about six minutes to build on the GPU
 * machine, too long beside anything else in one call. Same program, same
 * checks, same table (the other columns print 0 and "-"). */
#define MP_PROBE_APPLY_ONLY 1
#include "gemm1x1_stats_sm90_cutlass.cu"
