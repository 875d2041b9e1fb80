use std::sync::Mutex;

use chrono::{DateTime, Utc};
use karpenter_cloudprovider::{Clock, OfferingRef};
use karpenter_requirements::labels;
use karpenter_requirements::{InstanceType, Offering, Overhead, Requirement, ResourceList};

use super::*;

#[derive(Debug, Default)]
struct FakeArc {
    answers: Mutex<Vec<Result<Vec<AppliedShift>, AwsApiError>>>,
    asked: Mutex<Vec<String>>,
}

impl FakeArc {
    fn answer(&self, a: Result<Vec<AppliedShift>, AwsApiError>) {
        self.answers.lock().unwrap().push(a);
    }
}

#[async_trait]
impl ZonalShiftApi for FakeArc {
    async fn applied_shifts(&self, resource_arn: &str) -> Result<Vec<AppliedShift>, AwsApiError> {
        self.asked.lock().unwrap().push(resource_arn.to_owned());
        let mut answers = self.answers.lock().unwrap();
        if answers.is_empty() { Ok(Vec::new()) } else { answers.remove(0) }
    }
}

#[derive(Default)]
struct Recorded(Mutex<Vec<String>>);

#[async_trait]
impl ZonalShiftEvents for Recorded {
    async fn shift_started(&self, zone: &str, shift: &AppliedShift) {
        self.0.lock().unwrap().push(format!("ZonalShiftActive {zone} {} {}", shift.kind, shift.id));
    }
    async fn shift_ended(&self, zone: &str) {
        self.0.lock().unwrap().push(format!("ZonalShiftCleared {zone}"));
    }
}

#[derive(Debug)]
struct FixedClock;
impl Clock for FixedClock {
    fn now(&self) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }
}

const ARN: &str = "arn:aws:eks:us-east-1:111122223333:cluster/prod";

fn shift(zone_id: &str, kind: ShiftKind, id: &str) -> AppliedShift {
    AppliedShift { away_from: zone_id.into(), kind, id: id.into() }
}

fn watcher() -> (Arc<FakeArc>, Arc<Recorded>, UnavailableOfferings, ZonalShiftWatcher) {
    let api = Arc::new(FakeArc::default());
    let events = Arc::new(Recorded::default());
    let offerings = UnavailableOfferings::new(Arc::new(FixedClock));
    let zones = [("use1-az1", "us-east-1b"), ("use1-az2", "us-east-1a")]
        .into_iter()
        .map(|(id, name)| (id.to_owned(), name.to_owned()))
        .collect();
    let w = ZonalShiftWatcher::new(api.clone(), ARN, zones, offerings.clone(), events.clone());
    (api, events, offerings, w)
}

fn instance_type() -> InstanceType {
    let offering = |zone: &str| {
        Offering::new(
            [
                Requirement::in_values(labels::ZONE, [zone]),
                Requirement::in_values(labels::CAPACITY_TYPE, ["on-demand"]),
            ]
            .into_iter()
            .collect(),
            1.0,
        )
    };
    InstanceType::new(
        "m5.large",
        [Requirement::in_values(labels::INSTANCE_TYPE, ["m5.large"])].into_iter().collect(),
        vec![offering("us-east-1a"), offering("us-east-1b")],
        ResourceList::new(),
        Overhead::default(),
    )
}

fn available_zones(offerings: &UnavailableOfferings) -> Vec<String> {
    let mut its = [instance_type()];
    offerings.apply(&mut its);
    its[0].offerings.iter().filter(|o| o.available).filter_map(|o| o.zone().map(str::to_owned)).collect()
}

#[tokio::test]
async fn a_shift_makes_its_zone_unavailable_until_it_ends() {
    let (api, events, offerings, w) = watcher();
    assert_eq!(available_zones(&offerings), ["us-east-1a", "us-east-1b"]);
    let version = offerings.version();

    api.answer(Ok(vec![shift("use1-az1", ShiftKind::ZonalShift, "zs-1")]));
    let changes = w.poll().await.unwrap();
    assert_eq!(changes, ZoneChanges { started: vec!["us-east-1b".into()], ended: vec![] });
    assert_eq!(available_zones(&offerings), ["us-east-1a"], "the shifted zone (by id use1-az1) is not offered");
    assert!(offerings.is_zone_shifted("us-east-1b") && !offerings.is_zone_shifted("us-east-1a"));
    assert!(offerings.is_unavailable(&OfferingRef::new("m5.large", "us-east-1b", "spot")));
    assert_ne!(offerings.version(), version, "cached catalogues rebuild");

    // Still shifted: no new event.
    api.answer(Ok(vec![shift("use1-az1", ShiftKind::ZonalShift, "zs-1")]));
    assert_eq!(w.poll().await.unwrap(), ZoneChanges::default());

    api.answer(Ok(vec![]));
    let changes = w.poll().await.unwrap();
    assert_eq!(changes, ZoneChanges { started: vec![], ended: vec!["us-east-1b".into()] });
    assert_eq!(available_zones(&offerings), ["us-east-1a", "us-east-1b"]);
    assert_eq!(
        *events.0.lock().unwrap(),
        ["ZonalShiftActive us-east-1b zonal shift zs-1", "ZonalShiftCleared us-east-1b"]
    );
    assert!(api.asked.lock().unwrap().iter().all(|a| a == ARN), "the cluster's ARN is the managed resource");
}

#[tokio::test]
async fn an_error_keeps_the_last_answer() {
    let (api, events, offerings, w) = watcher();
    api.answer(Ok(vec![shift("use1-az2", ShiftKind::Autoshift, "")]));
    w.poll().await.unwrap();
    api.answer(Err(AwsApiError::new("GetManagedResource", "ThrottlingException", "slow down")));
    assert!(w.poll().await.is_err());
    assert!(offerings.is_zone_shifted("us-east-1a"), "a failed poll does not lift the shift");
    assert_eq!(w.shifted_zones(), BTreeSet::from(["us-east-1a".to_owned()]));
    assert_eq!(events.0.lock().unwrap().len(), 1);

    // An error before any answer shifts nothing.
    let (api, _, offerings, w) = watcher();
    api.answer(Err(AwsApiError::new("GetManagedResource", "AccessDeniedException", "no")));
    assert!(w.poll().await.is_err());
    assert!(!offerings.is_zone_shifted("us-east-1a") && !offerings.is_zone_shifted("us-east-1b"));
}

#[tokio::test]
async fn two_shifts_of_one_zone_and_unknown_zone_ids() {
    let (api, events, offerings, w) = watcher();
    api.answer(Ok(vec![
        shift("use1-az1", ShiftKind::Autoshift, ""),
        shift("use1-az1", ShiftKind::PracticeRun, "pr-1"),
        shift("use1-az9", ShiftKind::ZonalShift, "zs-9"),
    ]));
    let changes = w.poll().await.unwrap();
    assert_eq!(changes.started, ["us-east-1b"], "an id the region lacks is skipped");
    assert!(offerings.is_zone_shifted("us-east-1b"));
    // The practice run ends, the autoshift stays: the zone stays shifted, no event.
    api.answer(Ok(vec![shift("use1-az1", ShiftKind::Autoshift, "")]));
    assert_eq!(w.poll().await.unwrap(), ZoneChanges::default());
    assert!(offerings.is_zone_shifted("us-east-1b"));
    assert_eq!(events.0.lock().unwrap().len(), 1);
}
