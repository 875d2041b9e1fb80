//! Subnets and security groups from their selector terms (api.md §3.1, cloudprovider-aws.md §7.4/§7.5).
//!
//! Terms are ORed and the fields of one term ANDed. Every `id` term of a list is merged into one query (one
//! `subnet-id` / `group-id` filter with all the ids), every security-group `name` term into one `group-name`
//! query, and each `tags` term is a query of its own (`tag:<key>` = value, `tag-key` for `*`). The answers are
//! unioned by id. Results are cached by the queries (so node classes with the same selectors share them) for
//! `SUBNET_REFRESH_INTERVAL` (subnets) or the security-group ttl.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use karpenter_api::ec2nodeclass::{SecurityGroup, SecurityGroupSelectorTerm, Subnet, SubnetSelectorTerm};
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

/// Resolves subnets, cached for `SUBNET_REFRESH_INTERVAL`, and remembers each subnet's free-IP count for the
/// launch-time subnet choice (cloudprovider-aws.md §7.1) for `max(5 min, refresh + 4 min)`.
#[derive(Debug)]
pub struct SubnetProvider {
    api: Arc<dyn SubnetApi>,
    cache: TtlCache<Vec<Vec<Filter>>, Vec<SubnetInfo>>,
    free_ips: TtlCache<String, i64>,
}

impl SubnetProvider {
    /// `refresh` is `SUBNET_REFRESH_INTERVAL` (default 1 min).
    pub fn new(api: Arc<dyn SubnetApi>, clock: Arc<dyn Clock>, refresh: Duration) -> Self {
        let ip_ttl = Duration::from_secs(300).max(refresh + Duration::from_secs(240));
        Self { api, cache: TtlCache::new(clock.clone(), refresh), free_ips: TtlCache::new(clock, ip_ttl) }
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
        for s in &subnets {
            self.free_ips.insert(s.id.clone(), s.available_ips);
        }
        self.cache.insert(sets, subnets.clone());
        Ok(subnets)
    }

    /// The last described free-IP count of a subnet, while it is fresh.
    pub fn available_ips(&self, subnet_id: &str) -> Option<i64> {
        self.free_ips.get(&subnet_id.to_string())
    }

    /// Sets a subnet's free-IP count (e.g. 0 after `InsufficientFreeAddressesInSubnet`).
    pub fn set_available_ips(&self, subnet_id: &str, count: i64) {
        self.free_ips.insert(subnet_id.to_string(), count);
    }

    /// For launches: per zone, the status subnet with the most free IPs (unknown counts rank last, then by id).
    pub fn zonal_subnets(&self, status: &[Subnet]) -> BTreeMap<String, Subnet> {
        let mut best: BTreeMap<String, (Option<i64>, Subnet)> = BTreeMap::new();
        for s in status {
            let ips = self.available_ips(&s.id);
            let better = match best.get(&s.zone) {
                None => true,
                Some((cur, cur_subnet)) => ips > *cur || (ips == *cur && s.id < cur_subnet.id),
            };
            if better {
                best.insert(s.zone.clone(), (ips, s.clone()));
            }
        }
        best.into_iter().map(|(z, (_, s))| (z, s)).collect()
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

/// How long resolved security groups are reused.
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
