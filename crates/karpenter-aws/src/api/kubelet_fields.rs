//! The field set of upstream's `kubelet.config.k8s.io/v1beta1 KubeletConfiguration` (Kubernetes 1.32 to 1.35,
//! the union: a field an older kubelet lacks only makes it log a warning), as data: each field's JSON name and
//! JSON shape. `spec.kubelet` is checked against it ([`check_field`]), since the CRD no longer does.
//!
//! Also which fields Bottlerocket has a `settings.kubernetes` key for ([`bottlerocket_setting`]): its settings
//! are a fixed, kebab-case set, not the kubelet's own configuration file.

use serde_json::Value;

use karpenter_api::validation::{Violations, field, index, key};

/// The JSON shape of a kubelet configuration field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    /// A JSON boolean.
    Bool,
    /// An integer within the int32 range.
    Int32,
    /// An integer within the int64 range.
    Int64,
    /// A non-negative integer within the uint32 range.
    Uint32,
    /// Any JSON number.
    Number,
    /// A JSON string.
    String,
    /// A Go duration string (`"30s"`, `"1h30m"`, `"1.5m"`).
    Duration,
    /// A duration string or an integer count of nanoseconds (the logging flush frequency).
    DurationOrInt,
    /// A resource quantity: a string that parses as one, or a number.
    Quantity,
    /// `maxPods` in Karpenter: an int32 or a CEL expression string (see `MaxPods`).
    Int32OrString,
    /// A JSON list whose items have the given shape.
    List(&'static FieldKind),
    /// A map with string keys.
    Map(&'static FieldKind),
    /// A nested object with these fields (any other field is unknown).
    Object(&'static [(&'static str, FieldKind)]),
}

use FieldKind::*;

const DURATION_MAP: FieldKind = Map(&Duration);
const STRING_LIST: FieldKind = List(&String);
const STRING_MAP: FieldKind = Map(&String);

const LOG_FORMAT_OPTIONS: FieldKind = Object(&[("infoBufferSize", Quantity), ("splitStream", Bool)]);
const LOGGING: FieldKind = Object(&[
    ("flushFrequency", DurationOrInt),
    ("format", String),
    ("options", Object(&[("json", LOG_FORMAT_OPTIONS), ("text", LOG_FORMAT_OPTIONS)])),
    ("verbosity", Uint32),
    ("vmodule", List(&Object(&[("filePattern", String), ("verbosity", Uint32)]))),
]);
const AUTHENTICATION: FieldKind = Object(&[
    ("anonymous", Object(&[("enabled", Bool)])),
    ("webhook", Object(&[("cacheTTL", Duration), ("enabled", Bool)])),
    ("x509", Object(&[("clientCAFile", String)])),
]);
const AUTHORIZATION: FieldKind = Object(&[
    ("mode", String),
    ("webhook", Object(&[("cacheAuthorizedTTL", Duration), ("cacheUnauthorizedTTL", Duration)])),
]);
const TAINT: FieldKind = Object(&[("effect", String), ("key", String), ("timeAdded", String), ("value", String)]);

/// Every top-level field, sorted by name (looked up by binary search).
const FIELDS: &[(&str, FieldKind)] = &[
    ("address", String),
    ("allowedUnsafeSysctls", STRING_LIST),
    ("authentication", AUTHENTICATION),
    ("authorization", AUTHORIZATION),
    ("cgroupDriver", String),
    ("cgroupRoot", String),
    ("cgroupsPerQOS", Bool),
    ("clusterDNS", STRING_LIST),
    ("clusterDomain", String),
    ("configMapAndSecretChangeDetectionStrategy", String),
    ("containerLogMaxFiles", Int32),
    ("containerLogMaxSize", String),
    ("containerLogMaxWorkers", Int32),
    ("containerLogMonitorInterval", Duration),
    ("containerRuntimeEndpoint", String),
    ("contentType", String),
    ("cpuCFSQuota", Bool),
    ("cpuCFSQuotaPeriod", Duration),
    ("cpuManagerPolicy", String),
    ("cpuManagerPolicyOptions", STRING_MAP),
    ("cpuManagerReconcilePeriod", Duration),
    ("crashLoopBackOff", Object(&[("maxContainerRestartPeriod", Duration)])),
    ("draManagerReconcilePeriod", Duration),
    ("enableContentionProfiling", Bool),
    ("enableControllerAttachDetach", Bool),
    ("enableDebugFlagsHandler", Bool),
    ("enableDebuggingHandlers", Bool),
    ("enableProfilingHandler", Bool),
    ("enableServer", Bool),
    ("enableSystemLogHandler", Bool),
    ("enableSystemLogQuery", Bool),
    ("enforceNodeAllocatable", STRING_LIST),
    ("eventBurst", Int32),
    ("eventRecordQPS", Int32),
    ("evictionHard", STRING_MAP),
    ("evictionMaxPodGracePeriod", Int32),
    ("evictionMinimumReclaim", STRING_MAP),
    ("evictionPressureTransitionPeriod", Duration),
    ("evictionSoft", STRING_MAP),
    ("evictionSoftGracePeriod", DURATION_MAP),
    ("failCgroupV1", Bool),
    ("failSwapOn", Bool),
    ("featureGates", Map(&Bool)),
    ("fileCheckFrequency", Duration),
    ("hairpinMode", String),
    ("healthzBindAddress", String),
    ("healthzPort", Int32),
    ("httpCheckFrequency", Duration),
    ("imageGCHighThresholdPercent", Int32),
    ("imageGCLowThresholdPercent", Int32),
    ("imageMaximumGCAge", Duration),
    ("imageMinimumGCAge", Duration),
    ("imagePullCredentialsVerificationPolicy", String),
    ("imageServiceEndpoint", String),
    ("iptablesDropBit", Int32),
    ("iptablesMasqueradeBit", Int32),
    ("kernelMemcgNotification", Bool),
    ("kubeAPIBurst", Int32),
    ("kubeAPIQPS", Int32),
    ("kubeReserved", STRING_MAP),
    ("kubeReservedCgroup", String),
    ("kubeletCgroups", String),
    ("localStorageCapacityIsolation", Bool),
    ("logging", LOGGING),
    ("makeIPTablesUtilChains", Bool),
    ("maxOpenFiles", Int64),
    ("maxParallelImagePulls", Int32),
    ("maxPods", Int32OrString),
    ("memoryManagerPolicy", String),
    ("memoryReservationPolicy", String),
    ("memorySwap", Object(&[("swapBehavior", String)])),
    ("memoryThrottlingFactor", Number),
    ("mergeDefaultEvictionSettings", Bool),
    ("nodeLeaseDurationSeconds", Int32),
    ("nodeStatusMaxImages", Int32),
    ("nodeStatusReportFrequency", Duration),
    ("nodeStatusUpdateFrequency", Duration),
    ("oomScoreAdj", Int32),
    ("podCIDR", String),
    ("podLogsDir", String),
    ("podPidsLimit", Int64),
    ("podsPerCore", Int32),
    ("port", Int32),
    ("preloadedImagesVerificationAllowlist", STRING_LIST),
    ("protectKernelDefaults", Bool),
    ("providerID", String),
    ("qosReserved", STRING_MAP),
    ("readOnlyPort", Int32),
    ("registerNode", Bool),
    ("registerWithTaints", List(&TAINT)),
    ("registryBurst", Int32),
    ("registryPullQPS", Int32),
    ("reservedMemory", List(&Object(&[("limits", Map(&Quantity)), ("numaNode", Int32)]))),
    ("reservedSystemCPUs", String),
    ("resolvConf", String),
    ("rotateCertificates", Bool),
    ("runOnce", Bool),
    ("runtimeRequestTimeout", Duration),
    ("seccompDefault", Bool),
    ("serializeImagePulls", Bool),
    ("serverTLSBootstrap", Bool),
    ("showHiddenMetricsForVersion", String),
    ("shutdownGracePeriod", Duration),
    ("shutdownGracePeriodByPodPriority", List(&Object(&[("priority", Int32), ("shutdownGracePeriodSeconds", Int64)]))),
    ("shutdownGracePeriodCriticalPods", Duration),
    ("singleProcessOOMKill", Bool),
    ("staticPodPath", String),
    ("staticPodURL", String),
    ("staticPodURLHeader", Map(&STRING_LIST)),
    ("streamingConnectionIdleTimeout", Duration),
    ("syncFrequency", Duration),
    ("systemCgroups", String),
    ("systemReserved", STRING_MAP),
    ("systemReservedCgroup", String),
    ("tlsCertFile", String),
    ("tlsCipherSuites", STRING_LIST),
    ("tlsCurvePreferences", List(&Int32)),
    ("tlsMinVersion", String),
    ("tlsPrivateKeyFile", String),
    ("topologyManagerPolicy", String),
    ("topologyManagerPolicyOptions", STRING_MAP),
    ("topologyManagerScope", String),
    ("tracing", Object(&[("endpoint", String), ("samplingRatePerMillion", Int32)])),
    ("userNamespaces", Object(&[("idsPerPod", Int64)])),
    ("volumePluginDir", String),
    ("volumeStatsAggPeriod", Duration),
];

/// The shape of the top-level kubelet configuration field `name`, `None` when upstream has no such field.
pub fn kubelet_field_kind(name: &str) -> Option<FieldKind> {
    lookup(FIELDS, name)
}

fn lookup(fields: &[(&str, FieldKind)], name: &str) -> Option<FieldKind> {
    fields.binary_search_by(|(n, _)| n.cmp(&name)).ok().map(|i| fields[i].1)
}

/// The kubelet fields Karpenter does not interpret that Bottlerocket has a `settings.kubernetes` key for, with
/// the same JSON shape, sorted by field name. Bottlerocket names most keys by kebab-casing the field, but not all
/// (`eventRecordQPS` is `event-qps`), so the mapping is written out.
const BOTTLEROCKET_SETTINGS: &[(&str, &str)] = &[
    ("allowedUnsafeSysctls", "allowed-unsafe-sysctls"),
    ("clusterDomain", "cluster-domain"),
    ("containerLogMaxFiles", "container-log-max-files"),
    ("containerLogMaxSize", "container-log-max-size"),
    ("cpuManagerPolicy", "cpu-manager-policy"),
    ("cpuManagerReconcilePeriod", "cpu-manager-reconcile-period"),
    ("eventBurst", "event-burst"),
    ("eventRecordQPS", "event-qps"),
    ("kubeAPIBurst", "kube-api-burst"),
    ("kubeAPIQPS", "kube-api-qps"),
    ("memoryManagerPolicy", "memory-manager-policy"),
    ("podPidsLimit", "pod-pids-limit"),
    ("registryBurst", "registry-burst"),
    ("registryPullQPS", "registry-qps"),
    ("seccompDefault", "seccomp-default"),
    ("serverTLSBootstrap", "server-tls-bootstrap"),
    ("shutdownGracePeriod", "shutdown-grace-period"),
    ("shutdownGracePeriodCriticalPods", "shutdown-grace-period-for-critical-pods"),
    ("topologyManagerPolicy", "topology-manager-policy"),
    ("topologyManagerScope", "topology-manager-scope"),
];

/// Bottlerocket's `settings.kubernetes` key for the passed-through kubelet field `name`, if it has one.
pub fn bottlerocket_setting(name: &str) -> Option<&'static str> {
    BOTTLEROCKET_SETTINGS.binary_search_by(|(n, _)| n.cmp(&name)).ok().map(|i| BOTTLEROCKET_SETTINGS[i].1)
}

/// The passed-through kubelet field a Bottlerocket `settings.kubernetes` key sets, if Karpenter maps one to it
/// (the inverse of [`bottlerocket_setting`]).
pub fn kubelet_field_of_bottlerocket_setting(key: &str) -> Option<&'static str> {
    BOTTLEROCKET_SETTINGS.iter().find(|(_, k)| *k == key).map(|(n, _)| *n)
}

/// The field names Bottlerocket accepts, for error messages.
pub(crate) fn bottlerocket_fields() -> impl Iterator<Item = &'static str> {
    BOTTLEROCKET_SETTINGS.iter().map(|(n, _)| *n)
}

/// Checks the top-level field `name` with `value` at `path`: unknown field, or each wrong JSON shape inside it.
pub(crate) fn check_field(name: &str, value: &Value, path: &str, out: &mut Violations) {
    match kubelet_field_kind(name) {
        None => out.push(path, "unknown field"),
        Some(kind) => check_value(kind, value, path, out),
    }
}

fn check_value(kind: FieldKind, v: &Value, path: &str, out: &mut Violations) {
    // A null is an absent optional field, as the kubelet reads it.
    if v.is_null() {
        return;
    }
    let problem = match kind {
        Bool => (!v.is_boolean()).then_some("expected a boolean".to_owned()),
        Int32 => check_int(v, i64::from(i32::MIN), i64::from(i32::MAX), "int32"),
        Int64 => check_int(v, i64::MIN, i64::MAX, "int64"),
        Uint32 => check_int(v, 0, i64::from(u32::MAX), "uint32"),
        Number => (!v.is_number()).then_some("expected a number".to_owned()),
        String => (!v.is_string()).then_some("expected a string".to_owned()),
        Duration => check_duration(v),
        DurationOrInt if v.is_number() => check_int(v, i64::MIN, i64::MAX, "int64"),
        DurationOrInt => check_duration(v),
        Quantity => check_quantity(v),
        Int32OrString if v.is_string() => None,
        Int32OrString if v.is_i64() || v.is_u64() => check_int(v, i64::from(i32::MIN), i64::from(i32::MAX), "int32"),
        Int32OrString => Some("expected an int32 or a CEL expression string".to_owned()),
        List(item) => match v.as_array() {
            None => Some("expected a list".to_owned()),
            Some(items) => {
                items.iter().enumerate().for_each(|(i, x)| check_value(*item, x, &index(path, i), out));
                None
            }
        },
        Map(value) => match v.as_object() {
            None => Some("expected a map".to_owned()),
            Some(m) => {
                m.iter().for_each(|(k, x)| check_value(*value, x, &key(path, k), out));
                None
            }
        },
        Object(fields) => match v.as_object() {
            None => Some("expected an object".to_owned()),
            Some(m) => {
                for (k, x) in m {
                    match lookup(fields, k) {
                        None => out.push(field(path, k), "unknown field"),
                        Some(kind) => check_value(kind, x, &field(path, k), out),
                    }
                }
                None
            }
        },
    };
    if let Some(p) = problem {
        out.push(path, p);
    }
}

fn check_int(v: &Value, min: i64, max: i64, what: &str) -> Option<std::string::String> {
    if v.as_u64().is_some_and(|n| n > max as u64) {
        return Some(format!("{v} is out of the {what} range"));
    }
    match v.as_i64() {
        Some(n) if n < min || n > max => Some(format!("{v} is out of the {what} range")),
        Some(_) => None,
        None if v.as_u64().is_some() => None,
        None => Some("expected an integer".to_owned()),
    }
}

fn check_duration(v: &Value) -> Option<std::string::String> {
    match v.as_str() {
        Some(s) if is_go_duration(s) => None,
        Some(s) => Some(format!("invalid duration {s:?}: expected e.g. \"30s\", \"1h30m\" or \"1.5m\"")),
        None => Some("expected a duration string".to_owned()),
    }
}

fn check_quantity(v: &Value) -> Option<std::string::String> {
    match v {
        Value::Number(_) => None,
        Value::String(s) if s.parse::<karpenter_requirements::Quantity>().is_ok() => None,
        Value::String(s) => Some(format!("invalid quantity {s:?}")),
        _ => Some("expected a quantity".to_owned()),
    }
}

/// Go's `time.ParseDuration` syntax: an optional sign, then `0` or one or more decimal numbers each with a unit
/// (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`).
pub(crate) fn is_go_duration(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    if s == "0" {
        return true;
    }
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let mut number_len = int_len;
        let mut frac_len = 0;
        if rest[int_len..].starts_with('.') {
            frac_len = rest[int_len + 1..].bytes().take_while(u8::is_ascii_digit).count();
            number_len = int_len + 1 + frac_len;
        }
        if int_len == 0 && frac_len == 0 {
            return false;
        }
        rest = &rest[number_len..];
        let Some(unit) = ["ns", "us", "µs", "μs", "ms", "s", "m", "h"].into_iter().find(|u| rest.starts_with(u))
        else {
            return false;
        };
        // `m` must not swallow the `m` of `ms`: the list tries `ms` first.
        rest = &rest[unit.len()..];
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problems(name: &str, v: Value) -> Vec<std::string::String> {
        let mut out = Violations::new();
        check_field(name, &v, &field("kubelet", name), &mut out);
        out.into_iter().map(|v| v.to_string()).collect()
    }

    #[test]
    fn tables_are_sorted_for_binary_search() {
        assert!(FIELDS.windows(2).all(|w| w[0].0 < w[1].0), "FIELDS must be sorted");
        assert!(BOTTLEROCKET_SETTINGS.windows(2).all(|w| w[0].0 < w[1].0), "BOTTLEROCKET_SETTINGS must be sorted");
        for (f, _) in BOTTLEROCKET_SETTINGS {
            assert!(kubelet_field_kind(f).is_some(), "{f} is a kubelet field");
        }
    }

    #[test]
    fn unknown_fields_and_wrong_shapes_name_the_path() {
        assert_eq!(problems("fooBar", json!(1)), ["kubelet.fooBar: unknown field"]);
        assert_eq!(problems("podsPerCore", json!("x")), ["kubelet.podsPerCore: expected an integer"]);
        assert_eq!(
            problems("podsPerCore", json!(1u64 << 40)),
            [format!("kubelet.podsPerCore: {} is out of the int32 range", 1u64 << 40)]
        );
        assert_eq!(problems("evictionHard", json!(5)), ["kubelet.evictionHard: expected a map"]);
        assert_eq!(
            problems("evictionHard", json!({"memory.available": 5})),
            ["kubelet.evictionHard[memory.available]: expected a string"]
        );
        assert_eq!(
            problems("serializeImagePulls", json!("false")),
            ["kubelet.serializeImagePulls: expected a boolean"]
        );
        assert_eq!(
            problems("authentication", json!({"webhook": {"enabled": true, "cacheTtl": "2m"}})),
            ["kubelet.authentication.webhook.cacheTtl: unknown field"]
        );
        assert_eq!(
            problems("registerWithTaints", json!([{"key": "a", "effect": "NoSchedule"}, {"key": 1}])),
            ["kubelet.registerWithTaints[1].key: expected a string"]
        );
        assert_eq!(problems("shutdownGracePeriod", json!("soon")).len(), 1);
        assert_eq!(problems("maxPods", json!(1.5)), ["kubelet.maxPods: expected an int32 or a CEL expression string"]);
    }

    #[test]
    fn well_formed_values_pass() {
        for (name, v) in [
            ("shutdownGracePeriod", json!("1m30s")),
            ("cpuCFSQuotaPeriod", json!("1.5ms")),
            ("featureGates", json!({"InPlacePodVerticalScaling": true})),
            (
                "logging",
                json!({"format": "json", "flushFrequency": 5000000000u64, "options": {"json": {"infoBufferSize": "64Ki"}}}),
            ),
            ("reservedMemory", json!([{"numaNode": 0, "limits": {"memory": "1Gi"}}])),
            ("memoryThrottlingFactor", json!(0.8)),
            ("maxPods", json!("min(max_pods, 50)")),
            ("podPidsLimit", json!(-1)),
            ("tlsCipherSuites", json!(null)),
        ] {
            assert!(problems(name, v.clone()).is_empty(), "{name}: {v} -> {:?}", problems(name, v.clone()));
        }
    }

    #[test]
    fn go_durations() {
        for ok in ["0", "30s", "1h30m", "1.5m", "-2s", "300ms", "10us", "1µs", ".5s"] {
            assert!(is_go_duration(ok), "{ok}");
        }
        for bad in ["", "30", "1d", "s", "1.s.", "1h 30m", "-"] {
            assert!(!is_go_duration(bad), "{bad}");
        }
    }

    #[test]
    fn bottlerocket_names() {
        assert_eq!(bottlerocket_setting("eventRecordQPS"), Some("event-qps"));
        assert_eq!(
            bottlerocket_setting("shutdownGracePeriodCriticalPods"),
            Some("shutdown-grace-period-for-critical-pods")
        );
        assert_eq!(bottlerocket_setting("featureGates"), None);
    }
}
