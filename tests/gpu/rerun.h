/* rerun.h — runs this test program again, in a child process, with one
 * more environment variable. The library reads its environment once per
 * process (core/env.c: mp_env_get), so cases that need another setting
 * (MIXPREC_DETERMINISTIC=1, MIXPREC_NO_FUSION=1) than the rest of a test
 * run in a child that has it from its start. */
#ifndef MP_TESTS_GPU_RERUN_H
#define MP_TESTS_GPU_RERUN_H

/* Runs /proc/self/exe with argv (argv[0] first, NULL-terminated) and the
 * environment plus `assignment` ("NAME=value", replacing NAME), and waits.
 * Returns its exit status, or -1 with a line on stderr when it could not
 * start or did not exit normally (a signal). */
int gpu_test_rerun(const char *assignment, char *const *argv);

#endif
