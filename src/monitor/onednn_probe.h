/* onednn_probe.h — what the linked oneDNN offers, asked at run time: its
 * version and which kernel it picks for a bf16 convolution on this CPU.
 * Defined only in builds with oneDNN (MP_HAVE_ONEDNN). */
#ifndef MP_MONITOR_ONEDNN_PROBE_H
#define MP_MONITOR_ONEDNN_PROBE_H

#include <stdbool.h>
#include <stddef.h>

/* "2.6.3" (from dnnl_version(), the library actually loaded). */
void mp_onednn_probe_version(char *buf, size_t n);

/* The implementation oneDNN picks for a typical bf16 training convolution
 * (N16 C64 32x32, 3x3, pad 1) into impl ("brg:avx512_core_amx"; "" when
 * oneDNN has none); true when it is a JIT kernel, i.e. bf16 convolutions
 * would run natively (the same test the conv fast path applies). */
bool mp_onednn_probe_bf16_conv(char *impl, size_t n);

#endif
