/* hostdev.h — MP_HD marks an inline function compiled for the host and, in
 * CUDA sources, for the device too: one definition of a rule both sides run. */
#ifndef MP_CORE_HOSTDEV_H
#define MP_CORE_HOSTDEV_H

#ifdef __CUDACC__
#define MP_HD __host__ __device__
#else
#define MP_HD
#endif

#endif
