//! The macros' compile-time behaviour: every grammar form compiles
//! (`ui-tests/pass`), every mistake is a compile error with a message that
//! says what to write instead (`ui-tests/fail`, one `.stderr` snapshot per
//! case; regenerate with `TRYBUILD=overwrite cargo test --test ui` and read
//! each one).

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("ui-tests/pass/*.rs");
    cases.compile_fail("ui-tests/fail/*.rs");
}
