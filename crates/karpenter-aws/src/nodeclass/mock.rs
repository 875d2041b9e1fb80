//! An in-memory AWS for node class resolution tests (feature `test-util` for other crates): one [`MockAws`]
//! implements every trait of [`super::api`] over a shared world with EC2's filter semantics (ids, names with `*`
//! wildcards, `tag:<k>`, `tag-key`, `state`, owners) and IAM's instance-profile rules (one role per profile, no
//! deletion with a role attached). Every call is logged; failures can be injected per operation.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;

use super::api::*;
use crate::api_error::AwsApiError;

/// The world [`MockAws`] serves. Tests fill it through [`MockAws::with`].
#[derive(Debug, Default)]
pub struct World {
    pub subnets: Vec<SubnetDescription>,
    pub security_groups: Vec<SecurityGroupDescription>,
    pub images: Vec<ImageDescription>,
    pub parameters: BTreeMap<String, String>,
    pub capacity_reservations: Vec<CapacityReservationDescription>,
    pub placement_groups: Vec<PlacementGroupDescription>,
    pub instance_profiles: BTreeMap<String, InstanceProfileDescription>,
    /// Operation names in call order (`DescribeSubnets`, `GetParameter:<name>`, `CreateInstanceProfile:<name>`).
    pub calls: Vec<String>,
    /// Errors returned (once each, in order) by the next calls of an operation.
    pub failures: BTreeMap<String, VecDeque<AwsApiError>>,
}

/// The in-memory AWS. Cheap to share behind an `Arc`.
#[derive(Debug, Default)]
pub struct MockAws {
    world: Mutex<World>,
}

/// Whether `value` matches an EC2 filter value with `*` (any run) and `?` (one character) wildcards.
pub fn wildcard_match(pattern: &str, value: &str) -> bool {
    let (p, v): (Vec<char>, Vec<char>) = (pattern.chars().collect(), value.chars().collect());
    let (mut pi, mut vi, mut star, mut mark) = (0, 0, None, 0);
    while vi < v.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == v[vi]) {
            pi += 1;
            vi += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = vi;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            vi = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

fn tags_match(filter: &Filter, tags: &BTreeMap<String, String>) -> Option<bool> {
    if filter.name == "tag-key" {
        return Some(filter.values.iter().any(|k| tags.contains_key(k)));
    }
    let key = filter.name.strip_prefix("tag:")?;
    Some(tags.get(key).is_some_and(|v| filter.values.iter().any(|p| wildcard_match(p, v))))
}

fn one_of(filter: &Filter, value: &str) -> bool {
    filter.values.iter().any(|p| wildcard_match(p, value))
}

impl MockAws {
    pub fn new() -> Self {
        Self::default()
    }

    /// Every API the resolver needs, answered by this one in-memory AWS.
    pub fn resolver_apis(self: &std::sync::Arc<Self>) -> super::ResolverApis {
        super::ResolverApis {
            subnets: self.clone(),
            security_groups: self.clone(),
            images: self.clone(),
            ssm: self.clone(),
            capacity_reservations: self.clone(),
            placement_groups: self.clone(),
            iam: self.clone(),
        }
    }

    /// Runs `f` on the world (to set it up or inspect it).
    pub fn with<R>(&self, f: impl FnOnce(&mut World) -> R) -> R {
        f(&mut self.world.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The logged calls.
    pub fn calls(&self) -> Vec<String> {
        self.with(|w| w.calls.clone())
    }

    /// How many logged calls start with `prefix`.
    pub fn count(&self, prefix: &str) -> usize {
        self.with(|w| w.calls.iter().filter(|c| c.starts_with(prefix)).count())
    }

    /// Makes the next call of `operation` fail with `error`.
    pub fn fail_next(&self, operation: &str, error: AwsApiError) {
        self.with(|w| w.failures.entry(operation.to_string()).or_default().push_back(error));
    }

    fn enter(&self, operation: &str, detail: &str) -> Result<(), AwsApiError> {
        self.with(|w| {
            w.calls.push(if detail.is_empty() { operation.to_string() } else { format!("{operation}:{detail}") });
            match w.failures.get_mut(operation).and_then(VecDeque::pop_front) {
                Some(e) => Err(e),
                None => Ok(()),
            }
        })
    }
}

fn no_such_entity(op: &str, name: &str) -> AwsApiError {
    AwsApiError::new(op, "NoSuchEntity", format!("Instance Profile {name} cannot be found."))
}

#[async_trait]
impl SubnetApi for MockAws {
    async fn describe_subnets(&self, filters: &[Filter]) -> Result<Vec<SubnetDescription>, AwsApiError> {
        self.enter("DescribeSubnets", "")?;
        Ok(self.with(|w| {
            w.subnets
                .iter()
                .filter(|s| {
                    filters.iter().all(|f| match f.name.as_str() {
                        "subnet-id" => one_of(f, &s.subnet_id),
                        "availability-zone" => one_of(f, &s.availability_zone),
                        _ => tags_match(f, &s.tags).unwrap_or(false),
                    })
                })
                .cloned()
                .collect()
        }))
    }
}

#[async_trait]
impl SecurityGroupApi for MockAws {
    async fn describe_security_groups(&self, filters: &[Filter]) -> Result<Vec<SecurityGroupDescription>, AwsApiError> {
        self.enter("DescribeSecurityGroups", "")?;
        Ok(self.with(|w| {
            w.security_groups
                .iter()
                .filter(|g| {
                    filters.iter().all(|f| match f.name.as_str() {
                        "group-id" => one_of(f, &g.group_id),
                        "group-name" => one_of(f, &g.group_name),
                        _ => tags_match(f, &g.tags).unwrap_or(false),
                    })
                })
                .cloned()
                .collect()
        }))
    }
}

#[async_trait]
impl ImageApi for MockAws {
    async fn describe_images(&self, request: &DescribeImagesRequest) -> Result<Vec<ImageDescription>, AwsApiError> {
        self.enter("DescribeImages", "")?;
        Ok(self.with(|w| {
            w.images
                .iter()
                .filter(|i| {
                    let owner_ok = request.owners.is_empty()
                        || i.owner_id.as_ref().is_some_and(|o| request.owners.iter().any(|r| r == o));
                    owner_ok
                        && request.filters.iter().all(|f| match f.name.as_str() {
                            "image-id" => one_of(f, &i.image_id),
                            "name" => i.name.as_deref().is_some_and(|n| one_of(f, n)),
                            "state" => one_of(f, "available"),
                            _ => tags_match(f, &i.tags).unwrap_or(false),
                        })
                })
                .cloned()
                .collect()
        }))
    }
}

#[async_trait]
impl SsmApi for MockAws {
    async fn get_parameter(&self, name: &str) -> Result<String, AwsApiError> {
        self.enter("GetParameter", name)?;
        self.with(|w| w.parameters.get(name).cloned())
            .ok_or_else(|| AwsApiError::new("GetParameter", "ParameterNotFound", format!("{name} not found")))
    }
}

#[async_trait]
impl CapacityReservationApi for MockAws {
    async fn describe_capacity_reservations(
        &self,
        request: &DescribeCapacityReservationsRequest,
    ) -> Result<Vec<CapacityReservationDescription>, AwsApiError> {
        self.enter("DescribeCapacityReservations", "")?;
        Ok(self.with(|w| {
            w.capacity_reservations
                .iter()
                .filter(|r| {
                    (request.capacity_reservation_ids.is_empty()
                        || request.capacity_reservation_ids.contains(&r.capacity_reservation_id))
                        && request.filters.iter().all(|f| match f.name.as_str() {
                            "state" => one_of(f, &r.state),
                            "owner-id" => one_of(f, &r.owner_id),
                            "instance-match-criteria" => one_of(f, &r.instance_match_criteria),
                            _ => tags_match(f, &r.tags).unwrap_or(false),
                        })
                })
                .cloned()
                .collect()
        }))
    }
}

#[async_trait]
impl PlacementGroupApi for MockAws {
    async fn describe_placement_groups(
        &self,
        request: &DescribePlacementGroupsRequest,
    ) -> Result<Vec<PlacementGroupDescription>, AwsApiError> {
        self.enter("DescribePlacementGroups", "")?;
        let found: Vec<PlacementGroupDescription> = self.with(|w| {
            w.placement_groups
                .iter()
                .filter(|g| request.group_ids.contains(&g.group_id) || request.group_names.contains(&g.group_name))
                .cloned()
                .collect()
        });
        if found.is_empty() {
            return Err(AwsApiError::new("DescribePlacementGroups", "InvalidPlacementGroup.Unknown", "unknown group"));
        }
        Ok(found)
    }
}

#[async_trait]
impl IamApi for MockAws {
    async fn get_instance_profile(&self, name: &str) -> Result<InstanceProfileDescription, AwsApiError> {
        self.enter("GetInstanceProfile", name)?;
        self.with(|w| w.instance_profiles.get(name).cloned()).ok_or_else(|| no_such_entity("GetInstanceProfile", name))
    }

    async fn create_instance_profile(
        &self,
        request: &CreateInstanceProfileRequest,
    ) -> Result<InstanceProfileDescription, AwsApiError> {
        self.enter("CreateInstanceProfile", &request.name)?;
        self.with(|w| {
            if w.instance_profiles.contains_key(&request.name) {
                return Err(AwsApiError::new("CreateInstanceProfile", "EntityAlreadyExists", "exists"));
            }
            let p = InstanceProfileDescription {
                name: request.name.clone(),
                id: Some(format!("AIPA{}", w.instance_profiles.len())),
                arn: Some(format!("arn:aws:iam::123456789012:instance-profile{}{}", request.path, request.name)),
                path: request.path.clone(),
                roles: vec![],
                tags: request.tags.clone(),
            };
            w.instance_profiles.insert(request.name.clone(), p.clone());
            Ok(p)
        })
    }

    async fn add_role_to_instance_profile(&self, profile: &str, role: &str) -> Result<(), AwsApiError> {
        self.enter("AddRoleToInstanceProfile", &format!("{profile}:{role}"))?;
        self.with(|w| {
            let p = w
                .instance_profiles
                .get_mut(profile)
                .ok_or_else(|| no_such_entity("AddRoleToInstanceProfile", profile))?;
            if !p.roles.is_empty() {
                return Err(AwsApiError::new("AddRoleToInstanceProfile", "LimitExceeded", "one role per profile"));
            }
            p.roles.push(role.to_string());
            Ok(())
        })
    }

    async fn remove_role_from_instance_profile(&self, profile: &str, role: &str) -> Result<(), AwsApiError> {
        self.enter("RemoveRoleFromInstanceProfile", &format!("{profile}:{role}"))?;
        self.with(|w| {
            let p = w
                .instance_profiles
                .get_mut(profile)
                .ok_or_else(|| no_such_entity("RemoveRoleFromInstanceProfile", profile))?;
            let before = p.roles.len();
            p.roles.retain(|r| r != role);
            if p.roles.len() == before {
                return Err(no_such_entity("RemoveRoleFromInstanceProfile", role));
            }
            Ok(())
        })
    }

    async fn delete_instance_profile(&self, name: &str) -> Result<(), AwsApiError> {
        self.enter("DeleteInstanceProfile", name)?;
        self.with(|w| {
            let p = w.instance_profiles.get(name).ok_or_else(|| no_such_entity("DeleteInstanceProfile", name))?;
            if !p.roles.is_empty() {
                return Err(AwsApiError::new("DeleteInstanceProfile", "DeleteConflict", "remove roles first"));
            }
            w.instance_profiles.remove(name);
            Ok(())
        })
    }

    async fn tag_instance_profile(&self, name: &str, tags: &BTreeMap<String, String>) -> Result<(), AwsApiError> {
        self.enter("TagInstanceProfile", name)?;
        self.with(|w| {
            let p = w.instance_profiles.get_mut(name).ok_or_else(|| no_such_entity("TagInstanceProfile", name))?;
            p.tags.extend(tags.clone());
            Ok(())
        })
    }

    async fn list_instance_profiles(&self, path_prefix: &str) -> Result<Vec<InstanceProfileDescription>, AwsApiError> {
        self.enter("ListInstanceProfiles", path_prefix)?;
        Ok(self.with(|w| {
            w.instance_profiles
                .values()
                .filter(|p| p.path.starts_with(path_prefix))
                .map(|p| InstanceProfileDescription { tags: BTreeMap::new(), ..p.clone() })
                .collect()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards() {
        assert!(wildcard_match("amazon-eks-node-*", "amazon-eks-node-1.30-v1"));
        assert!(wildcard_match("a?c", "abc"));
        assert!(!wildcard_match("a?c", "abbc"));
        assert!(wildcard_match("*", ""));
        assert!(!wildcard_match("abc", "abcd"));
    }
}
