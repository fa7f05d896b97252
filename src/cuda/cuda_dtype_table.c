/* cuda_dtype_table.c — the CUDA libraries' names for mixprec's dtypes, one
 * row per dtype (the CUDA side of core/dtype_traits.h): the cudaDataType
 * cuBLASLt takes and the cudnnDataType_t cuDNN takes. A dtype added to
 * mp_dtype stops the build here until its row exists. */
#include "cuda/cuda_ctx.h"

typedef struct {
    bool mapped;
    cudaDataType_t cuda;
    cudnnDataType_t cudnn;
} row;

_Static_assert(MP_DTYPE_COUNT == 5, "a new dtype needs its row in the CUDA dtype table");

static const row rows[MP_DTYPE_COUNT] = {
    [MP_DTYPE_F32] = {true, CUDA_R_32F, CUDNN_DATA_FLOAT},
    [MP_DTYPE_F16] = {true, CUDA_R_16F, CUDNN_DATA_HALF},
    [MP_DTYPE_BF16] = {true, CUDA_R_16BF, CUDNN_DATA_BFLOAT16},
    [MP_DTYPE_F64] = {true, CUDA_R_64F, CUDNN_DATA_DOUBLE},
    [MP_DTYPE_I32] = {true, CUDA_R_32I, CUDNN_DATA_INT32},
};

static const row *row_of(mp_dtype t) {
    MP_ASSERT((unsigned)t < MP_DTYPE_COUNT && rows[t].mapped);
    return &rows[t];
}

cudaDataType_t mp_cuda_data_type(mp_dtype t) { return row_of(t)->cuda; }
cudnnDataType_t mp_cudnn_data_type(mp_dtype t) { return row_of(t)->cudnn; }
