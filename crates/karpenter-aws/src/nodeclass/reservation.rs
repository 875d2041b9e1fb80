//! Capacity reservations (ODCRs and capacity blocks) and the placement group of a node class.
//!
//! Reservations: every `id` term goes into one query by `CapacityReservationIds`; every other term is a query of
//! its own with the filters `owner-id`, `instance-match-criteria` and the tags. Every query asks for
//! `state = active` only. A capacity block within 40 minutes of its end is reported `expiring`. How many
//! instances each reservation can still take is tracked in memory (24 h): synced from every describe, decremented
//! by launches, incremented by terminations, zeroed by capacity errors.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::api::{
    CapacityReservation, CapacityReservationSelectorTerm, CapacityReservationState, CapacityReservationType,
    InstanceMatchCriteria, PlacementGroupSelector,
};
use chrono::{DateTime, Utc};
use karpenter_cloudprovider::Clock;

use super::api::{
    CapacityReservationApi, CapacityReservationDescription, DescribeCapacityReservationsRequest,
    DescribePlacementGroupsRequest, Filter, PlacementGroupApi,
};
use super::cache::TtlCache;
use crate::api_error::AwsApiError;

/// A capacity block is `expiring` this long before its end.
pub const CAPACITY_BLOCK_EXPIRY_WINDOW: Duration = Duration::from_secs(40 * 60);
/// How long a tracked availability count is kept.
pub const AVAILABILITY_TTL: Duration = Duration::from_secs(24 * 3600);
/// How long described reservations are reused.
pub const CAPACITY_RESERVATION_CACHE_TTL: Duration = Duration::from_secs(60);

/// The `DescribeCapacityReservations` queries of a node class's reservation terms.
pub fn reservation_queries(terms: &[CapacityReservationSelectorTerm]) -> Vec<DescribeCapacityReservationsRequest> {
    let active = || Filter::new("state", ["active"]);
    let ids: Vec<String> = terms.iter().filter_map(|t| t.id.clone()).collect();
    let mut out = Vec::new();
    if !ids.is_empty() {
        out.push(DescribeCapacityReservationsRequest { capacity_reservation_ids: ids, filters: vec![active()] });
    }
    for term in terms.iter().filter(|t| t.id.is_none()) {
        let mut filters = Vec::new();
        if let Some(owner) = &term.owner_id {
            filters.push(Filter::new("owner-id", [owner.as_str()]));
        }
        if let Some(c) = term.instance_match_criteria {
            let v = match c {
                InstanceMatchCriteria::Open => "open",
                InstanceMatchCriteria::Targeted => "targeted",
            };
            filters.push(Filter::new("instance-match-criteria", [v]));
        }
        if let Some(tags) = &term.tags {
            filters.extend(Filter::for_tags(tags));
        }
        if filters.is_empty() {
            continue;
        }
        filters.push(active());
        out.push(DescribeCapacityReservationsRequest { capacity_reservation_ids: vec![], filters });
    }
    out
}

/// The status entry of a described reservation at `now`.
pub fn to_status(r: &CapacityReservationDescription, now: DateTime<Utc>) -> CapacityReservation {
    let reservation_type = match r.reservation_type.as_deref() {
        Some("capacity-block") => CapacityReservationType::CapacityBlock,
        _ => CapacityReservationType::Default,
    };
    let window = chrono::Duration::from_std(CAPACITY_BLOCK_EXPIRY_WINDOW).unwrap_or_default();
    let expiring =
        reservation_type == CapacityReservationType::CapacityBlock && r.end_date.is_some_and(|end| now >= end - window);
    CapacityReservation {
        id: r.capacity_reservation_id.clone(),
        availability_zone: r.availability_zone.clone(),
        instance_type: r.instance_type.clone(),
        owner_id: r.owner_id.clone(),
        instance_match_criteria: if r.instance_match_criteria == "targeted" {
            InstanceMatchCriteria::Targeted
        } else {
            InstanceMatchCriteria::Open
        },
        reservation_type,
        interruptible: r.interruptible,
        state: if expiring { CapacityReservationState::Expiring } else { CapacityReservationState::Active },
        end_time: r.end_date.map(karpenter_api::time::rfc3339),
    }
}

/// Resolves reservations and tracks their remaining instance counts.
#[derive(Debug)]
pub struct CapacityReservationProvider {
    api: Arc<dyn CapacityReservationApi>,
    clock: Arc<dyn Clock>,
    cache: TtlCache<Vec<DescribeCapacityReservationsRequest>, Vec<CapacityReservationDescription>>,
    available: TtlCache<String, i64>,
    version: AtomicU64,
}

impl CapacityReservationProvider {
    pub fn new(api: Arc<dyn CapacityReservationApi>, clock: Arc<dyn Clock>) -> Self {
        Self {
            api,
            cache: TtlCache::new(clock.clone(), CAPACITY_RESERVATION_CACHE_TTL),
            available: TtlCache::new(clock.clone(), AVAILABILITY_TTL),
            version: AtomicU64::new(0),
            clock,
        }
    }

    /// Sets the tracked count of `id` (bumping the version when it changes).
    fn set_count(&self, id: &str, n: i64) {
        if self.available.get(&id.to_string()) != Some(n) {
            self.version.fetch_add(1, Ordering::Relaxed);
        }
        self.available.insert(id.to_string(), n);
    }

    /// Changes whenever a tracked count does (cached offerings rebuild on it).
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Relaxed)
    }

    async fn describe(
        &self,
        terms: &[CapacityReservationSelectorTerm],
        cached: bool,
    ) -> Result<Vec<CapacityReservationDescription>, AwsApiError> {
        let queries = reservation_queries(terms);
        if cached && let Some(hit) = self.cache.get(&queries) {
            return Ok(hit);
        }
        let mut by_id: BTreeMap<String, CapacityReservationDescription> = BTreeMap::new();
        for q in &queries {
            for r in self.api.describe_capacity_reservations(q).await? {
                if r.state == "active" {
                    by_id.insert(r.capacity_reservation_id.clone(), r);
                }
            }
        }
        let out: Vec<CapacityReservationDescription> = by_id.into_values().collect();
        for r in &out {
            self.set_count(&r.capacity_reservation_id, r.available_instance_count);
        }
        self.cache.insert(queries, out.clone());
        Ok(out)
    }

    /// The active reservations the terms select, as status entries sorted by id.
    pub async fn list(
        &self,
        terms: &[CapacityReservationSelectorTerm],
    ) -> Result<Vec<CapacityReservation>, AwsApiError> {
        let now = self.clock.now();
        Ok(self.describe(terms, true).await?.iter().map(|r| to_status(r, now)).collect())
    }

    /// Whether reservation `id` is still selected by the terms, asking EC2 (no cache): drift confirmation.
    pub async fn is_selected_uncached(
        &self,
        terms: &[CapacityReservationSelectorTerm],
        id: &str,
    ) -> Result<bool, AwsApiError> {
        Ok(self.describe(terms, false).await?.iter().any(|r| r.capacity_reservation_id == id))
    }

    /// The tracked number of instances reservation `id` can still take (`None` when never described, or not
    /// for [`AVAILABILITY_TTL`]).
    pub fn available_count(&self, id: &str) -> Option<i64> {
        self.available.get(&id.to_string())
    }

    /// The tracked counts of `ids` (unknown ones left out).
    pub fn available_counts<'a>(&self, ids: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, i64> {
        ids.into_iter().filter_map(|id| Some((id.to_owned(), self.available_count(id)?))).collect()
    }

    /// An instance launched into reservation `id`.
    pub fn mark_launched(&self, id: &str) {
        if let Some(n) = self.available_count(id) {
            self.set_count(id, (n - 1).max(0));
        }
    }

    /// An instance of reservation `id` is gone.
    pub fn mark_terminated(&self, id: &str) {
        if let Some(n) = self.available_count(id) {
            self.set_count(id, n.saturating_add(1));
        }
    }

    /// EC2 answered with a capacity error for reservation `id`, or the reservation is reclaiming its
    /// instances: no room until the next describe.
    pub fn mark_unavailable(&self, id: &str) {
        self.set_count(id, 0);
    }

    /// When the status should next be recomputed: 1 minute, or earlier when a reservation expires or ends.
    pub fn next_requeue(&self, reservations: &[CapacityReservation]) -> Duration {
        let now = self.clock.now();
        let mut next = Duration::from_secs(60);
        let window = chrono::Duration::from_std(CAPACITY_BLOCK_EXPIRY_WINDOW).unwrap_or_default();
        for r in reservations {
            let Some(end) = r.end_time.as_deref().and_then(|t| DateTime::parse_from_rfc3339(t).ok()) else { continue };
            let end = end.with_timezone(&Utc);
            let mut points = vec![end];
            if r.reservation_type == CapacityReservationType::CapacityBlock {
                points.push(end - window);
            }
            for p in points.into_iter().filter(|p| *p > now) {
                if let Ok(d) = (p - now).to_std() {
                    next = next.min(d);
                }
            }
        }
        next
    }
}

/// A resolved placement group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlacementGroupInfo {
    pub id: String,
    pub name: String,
    /// `cluster`, `partition` or `spread`.
    pub strategy: String,
    /// Partitions of a partition group.
    pub partition_count: Option<i32>,
    /// `host` or `rack` for spread groups.
    pub spread_level: Option<String>,
}

impl PlacementGroupInfo {
    /// The number of partitions of a `partition` group (`None` for other strategies or an unknown count).
    pub fn partitions(&self) -> Option<i32> {
        (self.strategy == "partition").then_some(self.partition_count).flatten().filter(|n| *n > 0)
    }

    /// Whether it is a `spread` group.
    pub fn is_spread(&self) -> bool {
        self.strategy == "spread"
    }
}

/// Resolves `spec.placementGroupSelector`, cached for a minute.
#[derive(Debug)]
pub struct PlacementGroupProvider {
    api: Arc<dyn PlacementGroupApi>,
    cache: TtlCache<(Option<String>, Option<String>), Option<PlacementGroupInfo>>,
}

impl PlacementGroupProvider {
    pub fn new(api: Arc<dyn PlacementGroupApi>, clock: Arc<dyn Clock>) -> Self {
        Self { api, cache: TtlCache::new(clock, Duration::from_secs(60)) }
    }

    /// The selected placement group when it exists and is `available`; `None` when it does not.
    pub async fn resolve(&self, selector: &PlacementGroupSelector) -> Result<Option<PlacementGroupInfo>, AwsApiError> {
        let key = (selector.id.clone(), selector.name.clone());
        if let Some(hit) = self.cache.get(&key) {
            return Ok(hit);
        }
        let request = DescribePlacementGroupsRequest {
            group_ids: selector.id.iter().cloned().collect(),
            group_names: if selector.id.is_none() { selector.name.iter().cloned().collect() } else { vec![] },
        };
        let found = match self.api.describe_placement_groups(&request).await {
            Ok(groups) => groups
                .into_iter()
                .filter(|g| g.state == "available")
                .find(|g| {
                    selector.id.as_ref().map_or(selector.name.as_ref() == Some(&g.group_name), |id| *id == g.group_id)
                })
                .map(|g| PlacementGroupInfo {
                    id: g.group_id,
                    name: g.group_name,
                    strategy: g.strategy,
                    partition_count: g.partition_count,
                    spread_level: g.spread_level,
                }),
            Err(e) if e.is_not_found() || e.code.starts_with("InvalidPlacementGroup") => None,
            Err(e) => return Err(e),
        };
        self.cache.insert(key, found.clone());
        Ok(found)
    }
}
