/** @file mixprec/export.h
 * MP_API marks the functions libmixprec exports; everything else stays
 * private to the library (it is compiled with hidden visibility). */
#ifndef MIXPREC_EXPORT_H
#define MIXPREC_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define MP_API __attribute__((visibility("default")))
#else
#define MP_API
#endif

#endif /* MIXPREC_EXPORT_H */
