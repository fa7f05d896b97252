/* test_median.c — core/median.h, the median the benchmarks and train-gan's
 * batch_times.jsonl quote: odd and even counts (the mean of the two middle
 * values), unsorted input sorted in place, one value, none. */
#include "check.h"
#include "core/median.h"

int main(void) {
    double d[] = {4.0, 1.0, 3.0, 2.0};
    CHECK(mp_median_double(d, 4) == 2.5, "even count: %g, want 2.5", mp_median_double(d, 4));
    CHECK(d[0] == 1.0 && d[1] == 2.0 && d[2] == 3.0 && d[3] == 4.0, "not sorted in place");
    double o[] = {7.0, -1.0, 5.0};
    CHECK(mp_median_double(o, 3) == 5.0, "odd count: %g", o[1]);
    double one = 9.5;
    CHECK(mp_median_double(&one, 1) == 9.5, "one value");
    CHECK(mp_median_double(NULL, 0) == 0.0, "no values");
    float f[] = {10.0f, 0.5f, 2.0f, 8.0f, 1.0f, 3.0f};
    CHECK(mp_median_float(f, 6) == 2.5f, "float, even count: %g, want 2.5", mp_median_float(f, 6));
    float g[] = {3.0f, 1.0f, 2.0f};
    CHECK(mp_median_float(g, 3) == 2.0f, "float, odd count");
    return test_summary("test_median");
}
