// Test-only, loaded with `node --import` into a process whose wall clock a test sets off from the
// machine's: `Date.now()` and `new Date()` read GANTRY_TEST_CLOCK_SKEW_MS (ms, may be negative) later.
// Timers and `performance.now()` are left alone, as a clock set wrong leaves them.
const skew = Number(process.env.GANTRY_TEST_CLOCK_SKEW_MS ?? 0);
if (skew !== 0) {
  const RealDate = Date;
  const realNow = RealDate.now.bind(RealDate);
  class SkewedDate extends RealDate {
    constructor(...args) {
      if (args.length === 0) super(realNow() + skew);
      else super(...args);
    }
    static now() {
      return realNow() + skew;
    }
  }
  globalThis.Date = SkewedDate;
}
