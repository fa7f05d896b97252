/* sysinfo.h — what this machine offers mixprec, for `mixprec info` and run
 * records: the NVIDIA GPUs (through the CUDA driver, loaded with dlopen so a
 * CPU build needs nothing), the tensor-core dtypes of a compute capability,
 * the versions of the libraries mixprec uses (oneDNN linked; CUDA, cuDNN,
 * cuBLASLt, NCCL, NVML found by soname at run time) and how bf16
 * convolutions run on this CPU. */
#ifndef MP_MONITOR_SYSINFO_H
#define MP_MONITOR_SYSINFO_H

#include <stdbool.h>
#include <stddef.h>

enum { MP_MAX_GPUS = 16 };

typedef struct {
    char name[128];         /* "NVIDIA H200" */
    int cc_major, cc_minor; /* compute capability: 9.0 = sm_90 */
    int sm_count;
    int clock_mhz;          /* peak SM clock, 0 when the driver does not say */
    size_t total_bytes;
} mp_gpu_device;

typedef struct {
    int count;
    mp_gpu_device dev[MP_MAX_GPUS];
    char error[256];        /* why count is 0: "libcuda.so.1: cannot open shared object file: ..." */
} mp_gpu_list;

/* Lists the GPUs through libcuda.so.1 (cuInit, cuDeviceGet*). Never fails:
 * count 0 with the reason in error. */
void mp_gpu_list_query(mp_gpu_list *out);

/* Tensor-core dtypes by compute capability: fp16 from sm_70, bf16 and tf32
 * from sm_80, fp8 from sm_89. */
typedef enum {
    MP_TC_FP16 = 1u << 0,
    MP_TC_BF16 = 1u << 1,
    MP_TC_TF32 = 1u << 2,
    MP_TC_FP8 = 1u << 3,
} mp_tensor_core_dtype;
unsigned mp_gpu_tensor_core_dtypes(int cc_major, int cc_minor);
/* Name of one MP_TC_* bit: "fp16". */
const char *mp_tensor_core_dtype_name(unsigned bit);

typedef enum {
    MP_LIB_ONEDNN,
    MP_LIB_CUDA_DRIVER,
    MP_LIB_CUDA_RUNTIME,
    MP_LIB_CUDNN,
    MP_LIB_CUBLASLT,
    MP_LIB_NCCL,
    MP_LIB_NVML,
    MP_LIB_COUNT
} mp_lib_id;

typedef struct {
    const char *name;  /* "cuDNN" */
    const char *key;   /* "cudnn" (JSON) */
    bool found;
    char version[64];  /* "9.19.0"; NVML: the driver version "580.65.06" */
    char detail[300];  /* the file loaded, "linked" (oneDNN), or why not found (oneDNN: not built in) */
} mp_lib_info;

/* Loads the library by its sonames and asks its version. Libraries stay
 * loaded (unloading CUDA libraries at run time is not reliably safe). */
void mp_lib_info_query(mp_lib_id id, mp_lib_info *out);

/* How bf16 convolutions run here: natively through oneDNN's bf16 kernels
 * (a JIT kernel exists for this CPU: AMX / AVX-512 BF16), or emulated (f32
 * kernels on bf16-rounded inputs, outputs rounded to bf16), and why. */
typedef struct {
    bool native;
    char detail[256];
} mp_bf16_path;
void mp_cpu_bf16_path_query(mp_bf16_path *out);

#endif
