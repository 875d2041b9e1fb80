//! Subnets and security groups from their selector terms.
//!
//! Terms are ORed and the fields of one term ANDed. Every `id` term of a list is merged into one query (one
//! `subnet-id` / `group-id` filter with all the ids), every security-group `name` term into one `group-name`
//! query, and each `tags` term is a query of its own (`tag:<key>` = value, `tag-key` for `*`). The answers are
//! unioned by id. Results are cached by the queries (so node classes with the same selectors share them) for
//! `SUBNET_REFRESH_INTERVAL` (subnets) or the security-group ttl.
//!
//! [`SubnetIps`] is the launch-time subnet accounting: described free-IP
//! counts, the IPs launches in flight are predicted to use, and subnets out of addresses. The resolver's
//! [`SubnetProvider`] records the counts it describes into it; the instance provider asks it for a subnet per
//! zone ([`SubnetIps::reserve`]) and settles the prediction when CreateFleet answers ([`InFlightSubnets`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::api::{SecurityGroup, SecurityGroupSelectorTerm, Subnet, SubnetSelectorTerm};
use karpenter_cloudprovider::Clock;

use super::api::{Filter, SecurityGroupApi, SubnetApi};
use super::cache::TtlCache;
use crate::api_error::AwsApiError;

/// A resolved subnet with what launches need beyond the status entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubnetInfo {
    pub id: String,
    /// Availability zone name.
    pub zone: String,
    /// Availability zone id.
    pub zone_id: Option<String>,
    /// Free IPv4 addresses when described.
    pub available_ips: i64,
    pub tags: BTreeMap<String, String>,
}

impl SubnetInfo {
    /// The status entry.
    pub fn to_status(&self) -> Subnet {
        Subnet { id: self.id.clone(), zone: self.zone.clone(), zone_id: self.zone_id.clone() }
    }
}

/// The `DescribeSubnets` queries of a node class's subnet terms.
pub fn subnet_filter_sets(terms: &[SubnetSelectorTerm]) -> Vec<Vec<Filter>> {
    let ids: Vec<String> = terms.iter().filter_map(|t| t.id.clone()).collect();
    let mut sets = Vec::new();
    if !ids.is_empty() {
        sets.push(vec![Filter::new("subnet-id", ids)]);
    }
    for term in terms.iter().filter(|t| t.id.is_none()) {
        if let Some(tags) = term.tags.as_ref().filter(|t| !t.is_empty()) {
            sets.push(Filter::for_tags(tags));
        }
    }
    sets
}

/// The `DescribeSecurityGroups` queries of a node class's security-group terms.
pub fn security_group_filter_sets(terms: &[SecurityGroupSelectorTerm]) -> Vec<Vec<Filter>> {
    let ids: Vec<String> = terms.iter().filter_map(|t| t.id.clone()).collect();
    let names: Vec<String> = terms.iter().filter(|t| t.id.is_none()).filter_map(|t| t.name.clone()).collect();
    let mut sets = Vec::new();
    if !ids.is_empty() {
        sets.push(vec![Filter::new("group-id", ids)]);
    }
    if !names.is_empty() {
        sets.push(vec![Filter::new("group-name", names)]);
    }
    for term in terms.iter().filter(|t| t.id.is_none() && t.name.is_none()) {
        if let Some(tags) = term.tags.as_ref().filter(|t| !t.is_empty()) {
            sets.push(Filter::for_tags(tags));
        }
    }
    sets
}

/// The fleet error code of a subnet without free addresses.
pub const SUBNET_OUT_OF_ADDRESSES: &str = "InsufficientFreeAddressesInSubnet";
/// How long a subnet stays out of launches after `InsufficientFreeAddressesInSubnet`.
pub const SUBNET_UNAVAILABLE_TTL: Duration = Duration::from_secs(180);
/// How long a described free-IP count is trusted when no refresh interval says otherwise.
pub const DEFAULT_FREE_IP_TTL: Duration = Duration::from_secs(300);

/// The free-IP TTL for a `SUBNET_REFRESH_INTERVAL`: `max(5 min, refresh + 4 min)`.
pub fn free_ip_ttl(refresh: Duration) -> Duration {
    DEFAULT_FREE_IP_TTL.max(refresh.saturating_add(Duration::from_secs(240)))
}

#[derive(Clone, Debug, Default)]
struct SubnetIpState {
    /// The described count and when it stops being trusted.
    described: Option<(i64, DateTime<Utc>)>,
    /// IPs launches in flight are predicted to use (subtracted from the described count).
    in_flight: i64,
    /// Bumped whenever the count is replaced, so a late settle does not add back into a fresh count.
    epoch: u64,
    /// Out of addresses until then.
    unavailable_until: Option<DateTime<Utc>>,
}

/// The launch-time subnet accounting (see the module docs). Clones share the state; every time comes from the
/// injected clock.
#[derive(Clone)]
pub struct SubnetIps {
    clock: Arc<dyn Clock>,
    ttl: Duration,
    state: Arc<Mutex<BTreeMap<String, SubnetIpState>>>,
}

impl fmt::Debug for SubnetIps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubnetIps").field("ttl", &self.ttl).field("subnets", &self.lock().len()).finish()
    }
}

fn after(now: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d).ok().and_then(|d| now.checked_add_signed(d)).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Per zone, the available subnet with the most free IPs (see [`SubnetIps::choose`]).
fn pick(state: &BTreeMap<String, SubnetIpState>, now: DateTime<Utc>, subnets: &[Subnet]) -> BTreeMap<String, Subnet> {
    let mut best: BTreeMap<String, (Option<i64>, &Subnet)> = BTreeMap::new();
    for s in subnets {
        let st = state.get(&s.id);
        if st.and_then(|st| st.unavailable_until).is_some_and(|until| until > now) {
            continue;
        }
        let ips = st
            .and_then(|st| st.described.filter(|(_, until)| *until > now).map(|(n, _)| n.saturating_sub(st.in_flight)));
        let better = match best.get(&s.zone) {
            None => true,
            Some((cur, cur_subnet)) => ips > *cur || (ips == *cur && s.id < cur_subnet.id),
        };
        if better {
            best.insert(s.zone.clone(), (ips, s));
        }
    }
    best.into_iter().map(|(z, (_, s))| (z, s.clone())).collect()
}

impl SubnetIps {
    /// Empty accounting whose recorded counts are trusted for `ttl`.
    pub fn new(clock: Arc<dyn Clock>, ttl: Duration) -> Self {
        Self { clock, ttl, state: Arc::default() }
    }

    /// The same state, recording counts with another TTL (the resolver's `max(5 min, refresh + 4 min)`).
    pub fn with_ttl(&self, ttl: Duration) -> Self {
        Self { clock: self.clock.clone(), ttl, state: self.state.clone() }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, SubnetIpState>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A freshly described count: replaces the old one and forgets the in-flight predictions (the description
    /// already counts the instances that launched).
    pub fn record(&self, subnet_id: &str, available_ips: i64) {
        let now = self.clock.now();
        let mut state = self.lock();
        state.retain(|_, s| {
            s.in_flight != 0
                || s.described.is_some_and(|(_, until)| until > now)
                || s.unavailable_until.is_some_and(|until| until > now)
        });
        let s = state.entry(subnet_id.to_owned()).or_default();
        s.described = Some((available_ips, after(now, self.ttl)));
        s.in_flight = 0;
        s.epoch += 1;
    }

    /// The last described count, while it is trusted.
    pub fn described(&self, subnet_id: &str) -> Option<i64> {
        let now = self.clock.now();
        self.lock().get(subnet_id).and_then(|s| s.described).filter(|(_, until)| *until > now).map(|(n, _)| n)
    }

    /// The described count minus the in-flight predictions; `None` when no trusted count is known.
    pub fn free_ips(&self, subnet_id: &str) -> Option<i64> {
        let in_flight = self.in_flight(subnet_id);
        self.described(subnet_id).map(|n| n.saturating_sub(in_flight))
    }

    /// The IPs launches in flight are predicted to use in the subnet.
    pub fn in_flight(&self, subnet_id: &str) -> i64 {
        self.lock().get(subnet_id).map_or(0, |s| s.in_flight)
    }

    /// `InsufficientFreeAddressesInSubnet`: the subnet takes no launches for [`SUBNET_UNAVAILABLE_TTL`] and its
    /// count is 0.
    pub fn mark_unavailable(&self, subnet_id: &str) {
        let now = self.clock.now();
        let mut state = self.lock();
        let s = state.entry(subnet_id.to_owned()).or_default();
        s.unavailable_until = Some(after(now, SUBNET_UNAVAILABLE_TTL));
        s.described = Some((0, after(now, self.ttl.max(SUBNET_UNAVAILABLE_TTL))));
        s.in_flight = 0;
        s.epoch += 1;
    }

    /// Whether the subnet is out of addresses (marked within [`SUBNET_UNAVAILABLE_TTL`]).
    pub fn is_unavailable(&self, subnet_id: &str) -> bool {
        let now = self.clock.now();
        self.lock().get(subnet_id).and_then(|s| s.unavailable_until).is_some_and(|until| until > now)
    }

    /// A zone is unavailable only when it has subnets among `subnets` and every one of them is unavailable.
    pub fn is_zone_unavailable(&self, zone: &str, subnets: &[Subnet]) -> bool {
        let mut in_zone = subnets.iter().filter(|s| s.zone == zone).peekable();
        in_zone.peek().is_some() && in_zone.all(|s| self.is_unavailable(&s.id))
    }

    /// Per zone, the available subnet with the most free IPs (in-flight adjusted; unknown counts rank last, ties
    /// go to the smaller id). Zones whose subnets are all unavailable have none.
    pub fn choose(&self, subnets: &[Subnet]) -> BTreeMap<String, Subnet> {
        pick(&self.lock(), self.clock.now(), subnets)
    }

    /// Chooses a subnet per zone ([`Self::choose`]) and holds `predicted(zone)` IPs of each chosen subnet in flight
    /// (the minimum pod capacity among the launch's instance types offered in that zone), atomically so that
    /// concurrent launches spread over subnets. The returned guard settles the prediction; dropping it unsettled
    /// gives every prediction back.
    pub fn reserve(&self, subnets: &[Subnet], predicted: impl Fn(&str) -> i64) -> InFlightSubnets {
        let mut state = self.lock();
        let chosen = pick(&state, self.clock.now(), subnets);
        let mut reserved = Vec::new();
        for (zone, subnet) in &chosen {
            let ips = predicted(zone).max(0);
            if ips > 0 {
                let st = state.entry(subnet.id.clone()).or_default();
                st.in_flight = st.in_flight.saturating_add(ips);
                reserved.push((subnet.id.clone(), ips, st.epoch));
            }
        }
        drop(state);
        InFlightSubnets { ips: self.clone(), all: subnets.to_vec(), chosen, reserved, settled: false }
    }

    fn release(&self, reserved: &[(String, i64, u64)], used: &BTreeSet<&str>) {
        let mut state = self.lock();
        for (id, ips, epoch) in reserved {
            if used.contains(id.as_str()) {
                continue;
            }
            if let Some(s) = state.get_mut(id).filter(|s| s.epoch == *epoch) {
                s.in_flight = s.in_flight.saturating_sub(*ips).max(0);
            }
        }
    }
}

/// The subnets one launch chose, with their predicted IP use held in flight until [`Self::settle`].
#[derive(Debug)]
pub struct InFlightSubnets {
    ips: SubnetIps,
    all: Vec<Subnet>,
    chosen: BTreeMap<String, Subnet>,
    reserved: Vec<(String, i64, u64)>,
    settled: bool,
}

impl InFlightSubnets {
    /// Zone → chosen subnet.
    pub fn subnets(&self) -> &BTreeMap<String, Subnet> {
        &self.chosen
    }

    /// The chosen subnet's id in `zone`.
    pub fn subnet_for(&self, zone: &str) -> Option<&str> {
        self.chosen.get(zone).map(|s| s.id.as_str())
    }

    /// The predicted IPs held for a subnet by this launch.
    pub fn predicted(&self, subnet_id: &str) -> i64 {
        self.reserved.iter().filter(|(id, _, _)| id == subnet_id).map(|(_, ips, _)| ips).sum()
    }

    /// `InsufficientFreeAddressesInSubnet` for `subnet_id`: marks the subnet unavailable (count 0) and answers
    /// whether that left the subnet's zone without an available subnet of this launch's node class.
    pub fn out_of_addresses(&self, subnet_id: &str) -> Option<String> {
        let zone = self.all.iter().find(|s| s.id == subnet_id).map(|s| s.zone.clone());
        self.ips.mark_unavailable(subnet_id);
        zone.filter(|z| self.ips.is_zone_unavailable(z, &self.all))
    }

    /// CreateFleet answered: the predictions of subnets it launched into stay until the next description; the
    /// others are given back.
    pub fn settle<'a>(mut self, used: impl IntoIterator<Item = &'a str>) {
        let used: BTreeSet<&str> = used.into_iter().collect();
        self.ips.release(&self.reserved, &used);
        self.settled = true;
    }
}

impl Drop for InFlightSubnets {
    fn drop(&mut self) {
        if !self.settled {
            self.ips.release(&self.reserved, &BTreeSet::new());
        }
    }
}

/// Resolves subnets, cached for `SUBNET_REFRESH_INTERVAL`, and records each subnet's free-IP count into the
/// launch-time [`SubnetIps`] for `max(5 min, refresh + 4 min)`.
#[derive(Debug)]
pub struct SubnetProvider {
    api: Arc<dyn SubnetApi>,
    cache: TtlCache<Vec<Vec<Filter>>, Vec<SubnetInfo>>,
    free_ips: Mutex<SubnetIps>,
    ip_ttl: Duration,
}

impl SubnetProvider {
    /// `refresh` is `SUBNET_REFRESH_INTERVAL` (default 1 min).
    pub fn new(api: Arc<dyn SubnetApi>, clock: Arc<dyn Clock>, refresh: Duration) -> Self {
        let ip_ttl = free_ip_ttl(refresh);
        Self {
            api,
            cache: TtlCache::new(clock.clone(), refresh),
            free_ips: Mutex::new(SubnetIps::new(clock, ip_ttl)),
            ip_ttl,
        }
    }

    /// The accounting the described counts go into.
    pub fn ips(&self) -> SubnetIps {
        self.free_ips.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Records described counts into `ips` from now on (the instance provider's accounting, so launches see
    /// them).
    pub fn share_ips(&self, ips: &SubnetIps) {
        *self.free_ips.lock().unwrap_or_else(PoisonError::into_inner) = ips.with_ttl(self.ip_ttl);
    }

    /// The subnets the terms select, sorted by free IPs (most first) then id. Empty when nothing matches.
    pub async fn list(&self, terms: &[SubnetSelectorTerm]) -> Result<Vec<SubnetInfo>, AwsApiError> {
        let sets = subnet_filter_sets(terms);
        if let Some(hit) = self.cache.get(&sets) {
            return Ok(hit);
        }
        let mut by_id: BTreeMap<String, SubnetInfo> = BTreeMap::new();
        for filters in &sets {
            for s in self.api.describe_subnets(filters).await? {
                by_id.insert(
                    s.subnet_id.clone(),
                    SubnetInfo {
                        id: s.subnet_id,
                        zone: s.availability_zone,
                        zone_id: s.availability_zone_id,
                        available_ips: s.available_ip_address_count,
                        tags: s.tags,
                    },
                );
            }
        }
        let mut subnets: Vec<SubnetInfo> = by_id.into_values().collect();
        subnets.sort_by(|a, b| b.available_ips.cmp(&a.available_ips).then_with(|| a.id.cmp(&b.id)));
        let ips = self.ips();
        for s in &subnets {
            ips.record(&s.id, s.available_ips);
        }
        self.cache.insert(sets, subnets.clone());
        Ok(subnets)
    }

    /// The last described free-IP count of a subnet, while it is fresh.
    pub fn available_ips(&self, subnet_id: &str) -> Option<i64> {
        self.ips().described(subnet_id)
    }

    /// Sets a subnet's free-IP count as if described.
    pub fn set_available_ips(&self, subnet_id: &str, count: i64) {
        self.ips().record(subnet_id, count);
    }

    /// For launches: per zone, the available status subnet with the most free IPs (in-flight adjusted; unknown
    /// counts rank last, then by id).
    pub fn zonal_subnets(&self, status: &[Subnet]) -> BTreeMap<String, Subnet> {
        self.ips().choose(status)
    }

    /// Forgets every cached answer (tests, and after a node class changes its selectors nothing else is needed:
    /// the cache key is the query).
    pub fn reset(&self) {
        self.cache.clear();
    }
}

/// Resolves security groups, cached by query.
#[derive(Debug)]
pub struct SecurityGroupProvider {
    api: Arc<dyn SecurityGroupApi>,
    cache: TtlCache<Vec<Vec<Filter>>, Vec<SecurityGroup>>,
}

/// How long resolved security groups are reused by default (`SECURITY_GROUP_REFRESH_INTERVAL`'s default).
pub const SECURITY_GROUP_CACHE_TTL: Duration = Duration::from_secs(60);

impl SecurityGroupProvider {
    pub fn new(api: Arc<dyn SecurityGroupApi>, clock: Arc<dyn Clock>, ttl: Duration) -> Self {
        Self { api, cache: TtlCache::new(clock, ttl) }
    }

    /// The security groups the terms select (`{id, name}`), sorted by id. Empty when nothing matches.
    pub async fn list(&self, terms: &[SecurityGroupSelectorTerm]) -> Result<Vec<SecurityGroup>, AwsApiError> {
        let sets = security_group_filter_sets(terms);
        if let Some(hit) = self.cache.get(&sets) {
            return Ok(hit);
        }
        let mut by_id: BTreeMap<String, SecurityGroup> = BTreeMap::new();
        for filters in &sets {
            for g in self.api.describe_security_groups(filters).await? {
                let name = Some(g.group_name).filter(|n| !n.is_empty());
                by_id.insert(g.group_id.clone(), SecurityGroup { id: g.group_id, name });
            }
        }
        let groups: Vec<SecurityGroup> = by_id.into_values().collect();
        self.cache.insert(sets, groups.clone());
        Ok(groups)
    }
}

#[cfg(test)]
mod tests {
    use karpenter_testing::FakeClock;

    use super::*;

    fn subnet(id: &str, zone: &str) -> Subnet {
        Subnet { id: id.into(), zone: zone.into(), zone_id: None }
    }

    fn setup() -> (FakeClock, SubnetIps, Vec<Subnet>) {
        let clock = FakeClock::default();
        let ips = SubnetIps::new(Arc::new(clock.clone()), DEFAULT_FREE_IP_TTL);
        let subnets = vec![subnet("subnet-a1", "a"), subnet("subnet-a2", "a"), subnet("subnet-b1", "b")];
        ips.record("subnet-a1", 100);
        ips.record("subnet-a2", 120);
        ips.record("subnet-b1", 10);
        (clock, ips, subnets)
    }

    fn chosen(ips: &SubnetIps, subnets: &[Subnet]) -> Vec<String> {
        ips.choose(subnets).into_values().map(|s| s.id).collect()
    }

    #[test]
    fn most_free_ips_per_zone_adjusted_by_launches_in_flight() {
        let (_, ips, subnets) = setup();
        assert_eq!(chosen(&ips, &subnets), ["subnet-a2", "subnet-b1"]);
        // A launch holds its predicted use (per zone) until the fleet answers.
        let first = ips.reserve(&subnets, |zone| if zone == "a" { 29 } else { 5 });
        assert_eq!(first.subnet_for("a"), Some("subnet-a2"));
        assert_eq!(first.predicted("subnet-a2"), 29);
        assert_eq!(ips.free_ips("subnet-a2"), Some(91));
        assert_eq!(ips.free_ips("subnet-b1"), Some(5));
        assert_eq!(ips.described("subnet-a2"), Some(120), "the described count itself is unchanged");
        // The next launch sees a2 at 91 < a1 at 100.
        let second = ips.reserve(&subnets, |zone| if zone == "a" { 29 } else { 3 });
        assert_eq!(second.subnet_for("a"), Some("subnet-a1"));
        assert_eq!(ips.free_ips("subnet-a1"), Some(71));
        // The first fleet launched into a2 only: b1's prediction comes back, a2's stays.
        first.settle(["subnet-a2"]);
        assert_eq!(ips.free_ips("subnet-a2"), Some(91));
        assert_eq!(ips.free_ips("subnet-b1"), Some(7), "b1 holds only the second launch's 3");
        // A launch that failed (dropped unsettled) gives everything back.
        drop(second);
        assert_eq!(ips.free_ips("subnet-a1"), Some(100));
        assert_eq!(ips.free_ips("subnet-b1"), Some(10));
        // A fresh description replaces the count and forgets in-flight use; a late settle does not add back.
        let third = ips.reserve(&subnets, |_| 50);
        ips.record("subnet-a2", 60);
        assert_eq!(ips.free_ips("subnet-a2"), Some(60));
        third.settle([]);
        assert_eq!(ips.free_ips("subnet-a2"), Some(60), "the settle predates the description");
        assert_eq!(ips.free_ips("subnet-b1"), Some(10));
    }

    #[test]
    fn a_subnet_out_of_addresses_is_skipped_for_three_minutes_and_the_zone_only_when_all_are() {
        let (clock, ips, subnets) = setup();
        let launch = ips.reserve(&subnets, |_| 1);
        assert_eq!(launch.out_of_addresses("subnet-a2"), None, "a1 still serves zone a");
        assert_eq!(ips.described("subnet-a2"), Some(0));
        assert!(ips.is_unavailable("subnet-a2"));
        assert!(!ips.is_zone_unavailable("a", &subnets));
        assert_eq!(chosen(&ips, &subnets), ["subnet-a1", "subnet-b1"]);
        assert_eq!(launch.out_of_addresses("subnet-a1"), Some("a".to_owned()), "no subnet left in zone a");
        assert!(ips.is_zone_unavailable("a", &subnets));
        assert!(!ips.is_zone_unavailable("c", &subnets), "a zone without subnets is not unavailable");
        assert_eq!(chosen(&ips, &subnets), ["subnet-b1"]);
        launch.settle([]);
        clock.step_secs(179);
        assert!(ips.is_unavailable("subnet-a1"));
        clock.step_secs(1);
        assert!(!ips.is_unavailable("subnet-a1"));
        assert_eq!(ips.free_ips("subnet-a1"), Some(0), "the zeroed count lasts until described again");
        assert_eq!(chosen(&ips, &subnets), ["subnet-a1", "subnet-b1"], "back, ties go to the smaller id");
        ips.record("subnet-a2", 7);
        assert_eq!(chosen(&ips, &subnets), ["subnet-a2", "subnet-b1"]);
    }

    #[test]
    fn counts_expire_and_unknown_counts_rank_last() {
        let (clock, ips, subnets) = setup();
        assert_eq!(free_ip_ttl(Duration::from_secs(60)), Duration::from_secs(300));
        assert_eq!(free_ip_ttl(Duration::from_secs(120)), Duration::from_secs(360));
        clock.step_secs(299);
        assert_eq!(ips.described("subnet-a1"), Some(100));
        clock.step_secs(1);
        assert_eq!(ips.described("subnet-a1"), None);
        ips.record("subnet-a1", 1);
        assert_eq!(chosen(&ips, &subnets), ["subnet-a1", "subnet-b1"], "a known count beats an expired one");
        // Clones and with_ttl share the state.
        let shared = ips.with_ttl(Duration::from_secs(600));
        shared.record("subnet-b1", 42);
        assert_eq!(ips.described("subnet-b1"), Some(42));
        clock.step_secs(599);
        assert_eq!(ips.described("subnet-b1"), Some(42));
        assert_eq!(ips.described("subnet-a1"), None);
    }
}
