/* multi_tensor.cu — building and freeing the device tables of
 * multi_tensor.cuh: the chunk list is computed on the host, both arrays go
 * to the device in one allocation and one copy. */
#include "cuda/multi_tensor.cuh"

#include <stdlib.h>
#include <string.h>

mp_status mp_mt_table_build(mp_cuda_ctx *ctx, const mp_mt_tensor *tensors, int n, const char *what,
                            mp_mt_table *out) {
    memset(out, 0, sizeof *out);
    if (n < 0 || (n > 0 && !tensors))
        return mp_error(MP_ERR_INVALID_ARG, "%s: bad tensor list (%d tensors)", what, n);
    long long n_chunks = 0;
    for (int i = 0; i < n; i++) {
        if (tensors[i].numel < 0)
            return mp_error(MP_ERR_INVALID_ARG, "%s: tensor %d has %lld elements", what, i, tensors[i].numel);
        n_chunks += (tensors[i].numel + MP_MT_CHUNK - 1) / MP_MT_CHUNK;
    }
    if (n_chunks > 0x7fffffffLL)
        return mp_error(MP_ERR_INVALID_ARG, "%s: %lld chunks of %d elements are too many", what, n_chunks,
                        MP_MT_CHUNK);
    size_t tensor_bytes = (size_t)n * sizeof(mp_mt_tensor);
    size_t bytes = tensor_bytes + (size_t)n_chunks * sizeof(mp_mt_chunk);
    if (bytes == 0) return MP_OK;

    char *host = (char *)malloc(bytes);
    if (!host) return mp_error(MP_ERR_NOMEM, "%s: out of host memory for a %zu-byte tensor table", what, bytes);
    memcpy(host, tensors, tensor_bytes);
    mp_mt_chunk *ch = (mp_mt_chunk *)(host + tensor_bytes);
    long long k = 0;
    for (int i = 0; i < n; i++)
        for (long long s = 0; s < tensors[i].numel; s += MP_MT_CHUNK) {
            long long left = tensors[i].numel - s;
            ch[k++] = mp_mt_chunk{i, (int)(left < MP_MT_CHUNK ? left : MP_MT_CHUNK), s};
        }

    void *dev = NULL;
    mp_status st = mp_cuda_check(cudaMalloc(&dev, bytes), "cudaMalloc", what);
    if (st == MP_OK)
        st = mp_cuda_check(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, ctx->stream), "cudaMemcpyAsync",
                           what);
    if (st == MP_OK) st = mp_cuda_check(cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize", what);
    free(host);
    if (st != MP_OK) {
        cudaFree(dev);
        return st;
    }
    out->block = dev;
    out->tensors = (const mp_mt_tensor *)dev;
    out->chunks = (const mp_mt_chunk *)((char *)dev + tensor_bytes);
    out->n_tensors = n;
    out->n_chunks = (int)n_chunks;
    out->grid = (unsigned)(n_chunks < MP_MT_MAX_BLOCKS ? n_chunks : MP_MT_MAX_BLOCKS);
    return MP_OK;
}

extern "C" unsigned mp_mt_pass_grid(long long n_chunks, long long resident) {
    if (n_chunks <= 0) return 0;
    if (resident < 1) resident = 1;
    if (resident > MP_MT_MAX_BLOCKS) resident = MP_MT_MAX_BLOCKS;
    const long long per_block = (n_chunks + resident - 1) / resident;
    return (unsigned)((n_chunks + per_block - 1) / per_block);
}

void mp_mt_table_free(mp_mt_table *t) {
    if (t->block) cudaFree(t->block);
    memset(t, 0, sizeof *t);
}
