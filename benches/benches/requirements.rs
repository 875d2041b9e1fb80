//! Hot paths of the requirement algebra: what the scheduler evaluates millions of times per pass.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use karpenter_benches as fx;
use karpenter_requirements::{Operator, Quantity, Requirement, order_by_price};

fn requirement(c: &mut Criterion) {
    let zones =
        Requirement::new("topology.kubernetes.io/zone", Operator::In, ["us-west-2a", "us-west-2b", "us-west-2c"], None)
            .expect("valid");
    let pod = Requirement::new("topology.kubernetes.io/zone", Operator::In, ["us-west-2b"], None).expect("valid");
    let not_in = Requirement::new("topology.kubernetes.io/zone", Operator::NotIn, ["us-west-2a"], None).expect("valid");
    c.bench_function("requirement/intersection In∩In", |b| {
        b.iter(|| black_box(&zones).intersection(black_box(&pod)))
    });
    c.bench_function("requirement/intersection In∩NotIn", |b| {
        b.iter(|| black_box(&zones).intersection(black_box(&not_in)))
    });
    c.bench_function("requirement/has_intersection In⋂In", |b| {
        b.iter(|| black_box(&zones).has_intersection(black_box(&pod)))
    });
    c.bench_function("requirement/has_intersection NotIn⋂In", |b| {
        b.iter(|| black_box(&not_in).has_intersection(black_box(&zones)))
    });
}

fn requirements(c: &mut Criterion) {
    let template = fx::nodepool_template();
    let pod = fx::pod_requirements();
    let well_known = fx::well_known_labels();
    assert!(template.compatible(&pod, &well_known).is_ok(), "fixture must be compatible");
    c.bench_function("requirements/compatible pod vs template (16 keys)", |b| {
        b.iter(|| black_box(&template).compatible(black_box(&pod), &well_known).is_ok())
    });
    c.bench_function("requirements/intersection pod ∩ template", |b| {
        b.iter(|| black_box(&template).intersection(black_box(&pod)))
    });
    let its = fx::instance_types(1);
    c.bench_function("requirements/intersects instance type vs claim", |b| {
        b.iter(|| black_box(&its[0].requirements).intersects(black_box(&template)).is_ok())
    });
}

fn quantity(c: &mut Criterion) {
    c.bench_function("quantity/parse 1.5Gi", |b| b.iter(|| black_box("1.5Gi").parse::<Quantity>()));
    c.bench_function("quantity/parse 250m", |b| b.iter(|| black_box("250m").parse::<Quantity>()));
    let q: Quantity = "1536Mi".parse().expect("valid");
    c.bench_function("quantity/format 1536Mi", |b| b.iter(|| black_box(&q).to_string()));
}

fn resources(c: &mut Criterion) {
    let its = fx::instance_types(1);
    let allocatable = its[0].allocatable().clone();
    let requests = fx::pod_requests();
    c.bench_function("resources/fits", |b| b.iter(|| black_box(&requests).fits(black_box(&allocatable))));
    c.bench_function("resources/add", |b| b.iter(|| black_box(&requests).add(black_box(&allocatable))));
}

fn instance_types(c: &mut Criterion) {
    let its = fx::instance_types(700);
    let claim = fx::nodepool_template().intersection(&fx::pod_requirements());
    let well_known = fx::well_known_labels();
    c.bench_function("instance_types/order_by_price 700", |b| {
        b.iter_batched(
            || its.iter().collect::<Vec<_>>(),
            |mut refs| {
                order_by_price(&mut refs, &claim, &well_known);
                refs
            },
            criterion::BatchSize::SmallInput,
        )
    });
}

criterion_group!(benches, requirement, requirements, quantity, resources, instance_types);
criterion_main!(benches);
