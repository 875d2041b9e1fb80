//! Host-port usage and conflicts, as the scheduler checks them when it places a pod.
//!
//! A pod uses `(hostIP, hostPort, protocol)` for every container port with a non-zero `hostPort`, in its
//! containers and its restartable (sidecar) init containers, which run alongside them. An empty host IP means
//! `0.0.0.0`; an empty protocol means `TCP`. Two usages conflict when protocol and port are equal and either IP
//! is unspecified (`0.0.0.0` / `::`) or both IPs are equal.

use std::fmt;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Pod, PodSpec};

/// One host port a pod binds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    /// Host IP as written (`0.0.0.0` when the pod left it empty).
    pub ip: String,
    /// Port number.
    pub port: i32,
    /// Protocol (`TCP` when the pod left it empty).
    pub protocol: String,
}

impl HostPort {
    /// A usage; empty `ip` / `protocol` are defaulted.
    pub fn new(ip: &str, port: i32, protocol: &str) -> Self {
        HostPort {
            ip: if ip.is_empty() { "0.0.0.0".to_owned() } else { ip.to_owned() },
            port,
            protocol: if protocol.is_empty() { "TCP".to_owned() } else { protocol.to_owned() },
        }
    }

    fn parsed_ip(&self) -> Option<IpAddr> {
        self.ip.parse::<IpAddr>().ok().map(|ip| ip.to_canonical())
    }

    fn unspecified(&self) -> bool {
        self.parsed_ip().is_some_and(|ip| ip.is_unspecified())
    }

    /// Whether the two usages cannot coexist on one node.
    pub fn conflicts_with(&self, other: &HostPort) -> bool {
        if self.protocol != other.protocol || self.port != other.port {
            return false;
        }
        if self.unspecified() || other.unspecified() {
            return true;
        }
        match (self.parsed_ip(), other.parsed_ip()) {
            (Some(a), Some(b)) => a == b,
            _ => self.ip == other.ip,
        }
    }
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IP={}, Port={}, Proto={}", self.ip, self.port, self.protocol)
    }
}

/// A host port already in use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("host port conflict: {wanted} conflicts with existing {existing}")]
pub struct HostPortConflict {
    /// The usage being added.
    pub wanted: HostPort,
    /// The usage it collides with.
    pub existing: HostPort,
}

/// The host ports `pod` binds, in container order.
pub fn pod_host_ports(pod: &Pod) -> Vec<HostPort> {
    pod.spec.as_ref().map(spec_host_ports).unwrap_or_default()
}

/// The host ports a pod with this spec binds, in container order.
pub fn spec_host_ports(spec: &PodSpec) -> Vec<HostPort> {
    let sidecars = spec.init_containers.iter().flatten().filter(|c| c.restart_policy.as_deref() == Some("Always"));
    spec.containers
        .iter()
        .chain(sidecars)
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.is_some_and(|hp| hp != 0))
        .map(|p| {
            HostPort::new(
                p.host_ip.as_deref().unwrap_or(""),
                p.host_port.unwrap_or(0),
                p.protocol.as_deref().unwrap_or(""),
            )
        })
        .collect()
}

/// The host ports in use on one (simulated) node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostPortUsage {
    used: Vec<HostPort>,
}

impl HostPortUsage {
    /// Nothing in use.
    pub fn new() -> Self {
        HostPortUsage::default()
    }

    /// The first conflict between `wanted` and the ports in use, if any.
    pub fn conflicts(&self, wanted: &[HostPort]) -> Result<(), HostPortConflict> {
        for w in wanted {
            if let Some(e) = self.used.iter().find(|u| u.conflicts_with(w)) {
                return Err(HostPortConflict { wanted: w.clone(), existing: e.clone() });
            }
        }
        Ok(())
    }

    /// Records ports as used (no conflict check).
    pub fn add(&mut self, ports: impl IntoIterator<Item = HostPort>) {
        self.used.extend(ports);
    }

    /// The ports in use.
    pub fn ports(&self) -> &[HostPort] {
        &self.used
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ContainerPort, PodSpec};

    #[test]
    fn conflict_rules() {
        let any = HostPort::new("", 80, "");
        assert_eq!((any.ip.as_str(), any.protocol.as_str()), ("0.0.0.0", "TCP"));
        let a = HostPort::new("10.0.0.1", 80, "TCP");
        let b = HostPort::new("10.0.0.2", 80, "TCP");
        assert!(any.conflicts_with(&a) && a.conflicts_with(&any));
        assert!(!a.conflicts_with(&b));
        assert!(a.conflicts_with(&HostPort::new("10.0.0.1", 80, "TCP")));
        assert!(!a.conflicts_with(&HostPort::new("10.0.0.1", 80, "UDP")));
        assert!(!a.conflicts_with(&HostPort::new("10.0.0.1", 81, "TCP")));
        assert!(HostPort::new("::", 80, "TCP").conflicts_with(&a));
        assert!(HostPort::new("::ffff:10.0.0.1", 80, "TCP").conflicts_with(&a));
    }

    #[test]
    fn pod_usage_and_conflicts() {
        let port = |hp: i32, ip: Option<&str>| ContainerPort {
            container_port: 8080,
            host_port: Some(hp),
            host_ip: ip.map(str::to_owned),
            ..Default::default()
        };
        let c = |ports, restart: Option<&str>| Container {
            name: "c".into(),
            ports: Some(ports),
            restart_policy: restart.map(str::to_owned),
            ..Default::default()
        };
        let pod = Pod {
            spec: Some(PodSpec {
                containers: vec![c(vec![port(80, None), port(0, None)], None)],
                init_containers: Some(vec![
                    c(vec![port(9000, Some("10.0.0.1"))], Some("Always")),
                    c(vec![port(7000, None)], None),
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let ports = pod_host_ports(&pod);
        assert_eq!(ports, vec![HostPort::new("", 80, "TCP"), HostPort::new("10.0.0.1", 9000, "TCP")]);
        let mut usage = HostPortUsage::new();
        assert!(usage.conflicts(&ports).is_ok());
        usage.add(ports.clone());
        let err = usage.conflicts(&[HostPort::new("10.1.1.1", 80, "TCP")]).unwrap_err();
        assert!(err.to_string().contains("Port=80"), "{err}");
        assert!(usage.conflicts(&[HostPort::new("10.0.0.2", 9000, "TCP")]).is_ok());
    }
}
