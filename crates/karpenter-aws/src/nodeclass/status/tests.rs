//! Unit tests of the pure pieces of a reconcile (the whole reconcile is covered with in-memory AWS APIs).

use super::*;
use crate::api_error::AwsErrorKind;

fn done<T>(part: Part<T>) -> (T, Result<(), (String, String)>) {
    match part {
        Part::Done(v, r) => (v, r),
        Part::Keep(m) => panic!("want a resolved part, got kept: {m}"),
    }
}

fn kept<T>(part: Part<T>) -> String {
    match part {
        Part::Keep(m) => m,
        Part::Done(..) => panic!("want a kept part"),
    }
}

fn reason<T>(part: Part<T>) -> String {
    done(part).1.expect_err("want False").0
}

#[test]
fn empty_parts_are_false_and_api_errors_kept_only_when_retryable() {
    assert_eq!(reason(amis_part(Ok(vec![]))), reasons::AMI_NOT_FOUND);
    assert_eq!(reason(subnets_part(Ok(vec![]))), reasons::SUBNETS_NOT_FOUND);
    assert_eq!(reason(security_groups_part(Ok(vec![]))), reasons::SECURITY_GROUPS_NOT_FOUND);

    let throttled = AwsApiError::with_kind("DescribeSubnets", "Throttling", "slow down", AwsErrorKind::Throttled);
    assert!(kept(subnets_part(Err(throttled))).contains("slow down"));
    let denied = AwsApiError::with_kind("DescribeSubnets", "AccessDenied", "no", AwsErrorKind::Unauthorized);
    let (v, r) = done(security_groups_part(Err(denied)));
    assert!(v.is_empty());
    assert_eq!(r.unwrap_err().0, reasons::SECURITY_GROUPS_NOT_FOUND);

    let groups = vec![SecurityGroup { id: "sg-1".into(), ..SecurityGroup::default() }];
    assert_eq!(done(security_groups_part(Ok(groups.clone()))), (groups, Ok(())));
}

#[test]
fn an_invalid_kubernetes_version_keeps_the_amis() {
    kept(amis_part(Err(AmiError::InvalidKubernetesVersion("one".into()))));
}

fn update() -> StatusUpdate {
    StatusUpdate {
        status: EC2NodeClassStatus::default(),
        requeue: REQUEUE_OK,
        generation: Some(3),
        now: DateTime::<Utc>::UNIX_EPOCH,
    }
}

fn condition<'a>(update: &'a StatusUpdate, type_: &str) -> (&'a str, ConditionStatus) {
    let c = update.status.conditions.iter().find(|c| c.type_ == type_).expect("condition set");
    (c.reason.as_str(), c.status)
}

#[test]
fn a_kept_part_is_unknown_until_first_resolved_and_then_stays_as_it_was() {
    let mut u = update();
    assert!(u.apply(conditions::SUBNETS_READY, Part::<Vec<Subnet>>::Keep("throttled".into()), |s, v| s.subnets = v));
    assert_eq!(condition(&u, conditions::SUBNETS_READY), (AWAITING_RESOLUTION, ConditionStatus::Unknown));

    let subnets = vec![Subnet { id: "subnet-1".into(), zone: "a".into(), zone_id: None }];
    assert!(!u.apply(conditions::SUBNETS_READY, Part::Done(subnets.clone(), Ok(())), |s, v| s.subnets = v));
    assert_eq!(condition(&u, conditions::SUBNETS_READY), (conditions::SUBNETS_READY, ConditionStatus::True));
    assert_eq!(u.status.subnets, subnets);

    assert!(u.apply(conditions::SUBNETS_READY, Part::<Vec<Subnet>>::Keep("throttled".into()), |s, v| s.subnets = v));
    assert_eq!(condition(&u, conditions::SUBNETS_READY), (conditions::SUBNETS_READY, ConditionStatus::True));
    assert_eq!(u.status.subnets, subnets);

    u.requeue_within(REQUEUE_SHORT);
    u.requeue_within(REQUEUE_VALIDATION);
    assert_eq!(u.requeue, REQUEUE_SHORT);
}

#[test]
fn ready_is_false_when_a_dependent_is_false_and_unknown_when_one_is_missing() {
    let mut u = update();
    u.set(conditions::AMIS_READY, Ok(()));
    let dependents = [conditions::AMIS_READY, conditions::SUBNETS_READY];
    let (s, reason, message) = ready_condition(&u.status, &dependents);
    assert_eq!((s, reason.as_str()), (ConditionStatus::Unknown, UNHEALTHY_DEPENDENTS));
    assert_eq!(message, format!("{}=Unknown", conditions::SUBNETS_READY));

    u.set(conditions::SUBNETS_READY, Err((reasons::SUBNETS_NOT_FOUND.into(), "none".into())));
    assert_eq!(ready_condition(&u.status, &dependents).0, ConditionStatus::False);

    u.set(conditions::SUBNETS_READY, Ok(()));
    assert_eq!(
        ready_condition(&u.status, &dependents),
        (ConditionStatus::True, conditions::READY.to_string(), String::new())
    );
}
