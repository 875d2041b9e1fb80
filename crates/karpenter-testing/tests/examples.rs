//! The toy provider example is what a cloud author starts from; it asserts that the conformance suite passes, so
//! running its `main` here keeps it passing, not just compiling.

#[path = "../examples/toy_provider.rs"]
mod toy_provider;

#[test]
fn toy_provider_passes_the_conformance_suite() {
    toy_provider::main();
}
