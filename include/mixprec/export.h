/* mixprec/export.h — MP_API, the mark on every function libmixprec exports.
 *
 * The library is compiled with -fvisibility=hidden, so libmixprec.so exports
 * the functions declared with MP_API in the public headers and nothing else. */
#ifndef MIXPREC_EXPORT_H
#define MIXPREC_EXPORT_H

/* Gives a public function default visibility (exported from libmixprec.so). */
#if defined(__GNUC__) || defined(__clang__)
#define MP_API __attribute__((visibility("default")))
#else
#define MP_API
#endif

#endif /* MIXPREC_EXPORT_H */
