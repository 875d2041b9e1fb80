//! The examples are the programs users start from; each asserts what it prints (every pod placed, one reason
//! per pod that fits nothing), so running their `main` here keeps them working, not just compiling.

#[path = "../examples/explain_unschedulable.rs"]
mod explain_unschedulable;
#[path = "../examples/plan_pods.rs"]
mod plan_pods;

#[test]
fn plan_pods_places_all_fifty_pods() {
    plan_pods::main();
}

#[test]
fn explain_unschedulable_gives_each_misfit_a_reason() {
    explain_unschedulable::main();
}
