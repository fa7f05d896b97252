/* clock.h — seconds on the monotonic clock, for timings and rates (the one
 * clock of the library's layers: kernels' timed choices, the plan profile,
 * the loader's wait, training progress). */
#ifndef MP_CORE_CLOCK_H
#define MP_CORE_CLOCK_H

/* Seconds since an arbitrary fixed point (CLOCK_MONOTONIC). */
double mp_now_seconds(void);

#endif
