//! A provider's own metric families: what a cloud provider records beyond the core's families (upstream's AWS
//! provider has its launch failures, request batchers and interruption queue), declared by the provider's crate
//! as data ([`ProviderFamily`]) and recorded into the same registry, so they are served by the same `/metrics`
//! in the same text exposition as the core's.
//!
//! The core declares none of them: a controller has a provider's families only when it runs that provider, and
//! only the provider's crate names them. A provider declares its families up front ([`Metrics::declare`]: the
//! binary does, so a conflict stops it before it starts) and records through the typed accessors
//! ([`Metrics::provider_counter`], [`Metrics::provider_gauge`], [`Metrics::provider_histogram`]), which declare a
//! family on first use when nobody did. Declaring the same family again is a no-op; declaring a different family
//! under a taken name is an error, as is a name or label that the exposition could not carry.

use std::collections::BTreeMap;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::{CounterFamily, FloatGauge, GaugeFamily, Labels, MetricDescriptor, MetricType, Metrics, labels};

/// One family a provider declares and records (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProviderFamily {
    /// The exposition name, `_total` included for counters (as [`MetricDescriptor::name`]).
    pub name: &'static str,
    /// Counter, gauge or histogram (with its buckets).
    pub kind: ProviderFamilyKind,
    /// The label names, in the order the series carry them.
    pub labels: &'static [&'static str],
    /// The `# HELP` text.
    pub help: &'static str,
}

/// The type of a [`ProviderFamily`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ProviderFamilyKind {
    /// A monotonic count.
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// Observations in these cumulative buckets (upper bounds, increasing), plus `_sum` and `_count`.
    Histogram(&'static [f64]),
}

impl ProviderFamilyKind {
    /// The type as the exposition and [`MetricDescriptor`] name it.
    pub fn metric_type(self) -> MetricType {
        match self {
            Self::Counter => MetricType::Counter,
            Self::Gauge => MetricType::Gauge,
            Self::Histogram(_) => MetricType::Histogram,
        }
    }
}

/// Why a provider family cannot be declared or recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MetricsError {
    /// The family's name, labels or buckets cannot be served as declared.
    #[error("metric family `{name}`: {problem}")]
    InvalidFamily {
        /// The family's name.
        name: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The name is taken by a core family or by another declaration of a different family.
    #[error("metric family `{name}` is already declared {by}")]
    NameTaken {
        /// The family's name.
        name: String,
        /// By whom: the core registry, or another declaration.
        by: &'static str,
    },
    /// The family was asked for as another type than it is declared with.
    #[error("metric family `{name}` is a {declared}, not a {asked}")]
    WrongType {
        /// The family's name.
        name: String,
        /// Its declared type.
        declared: &'static str,
        /// The type asked for.
        asked: &'static str,
    },
    /// A series was asked for with another number of label values than the family has labels.
    #[error("metric family `{name}` has {labels} labels, given {values} values")]
    LabelCount {
        /// The family's name.
        name: String,
        /// Its number of labels.
        labels: usize,
        /// The number of values given.
        values: usize,
    },
}

impl ProviderFamily {
    /// The family as docs/metrics.md lists it.
    pub fn descriptor(&self) -> MetricDescriptor {
        MetricDescriptor {
            name: self.name.to_owned(),
            kind: self.kind.metric_type(),
            labels: self.labels.to_vec(),
            dynamic_labels: false,
            help: self.help.to_owned(),
        }
    }

    /// The name the registry registers it under: a counter's without `_total`, which the encoder appends.
    fn registered_name(&self) -> &'static str {
        match self.kind {
            ProviderFamilyKind::Counter => self.name.strip_suffix("_total").unwrap_or(self.name),
            _ => self.name,
        }
    }

    /// Whether the exposition can carry the family as declared.
    fn check(&self) -> Result<(), MetricsError> {
        let invalid = |problem: String| Err(MetricsError::InvalidFamily { name: self.name.to_owned(), problem });
        if !is_metric_name(self.name) {
            return invalid("not a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)".into());
        }
        let is_counter = self.kind == ProviderFamilyKind::Counter;
        if is_counter != self.name.ends_with("_total") {
            return invalid("a counter's name, and only a counter's, ends in `_total`".into());
        }
        for (i, label) in self.labels.iter().enumerate() {
            if !is_label_name(label) {
                return invalid(format!("label `{label}` is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)"));
            }
            if self.labels[..i].contains(label) {
                return invalid(format!("label `{label}` is listed twice"));
            }
        }
        if let ProviderFamilyKind::Histogram(buckets) = self.kind {
            if self.labels.contains(&"le") {
                return invalid("a histogram's label `le` is its buckets'".into());
            }
            if buckets.is_empty() || buckets.iter().any(|b| !b.is_finite()) || buckets.windows(2).any(|w| w[0] >= w[1])
            {
                return invalid("a histogram's buckets are finite, increasing and at least one".into());
            }
        }
        Ok(())
    }
}

fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A histogram family's constructor: the family's own buckets.
#[derive(Debug, Clone, Copy)]
struct Buckets(&'static [f64]);

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(self.0.iter().copied())
    }
}

type BucketedHistogramFamily = Family<Labels, Histogram, Buckets>;

/// The series of one declared family.
#[derive(Debug, Clone)]
enum Series {
    Counter(CounterFamily),
    Gauge(GaugeFamily),
    Histogram(BucketedHistogramFamily),
}

/// The families providers declared, in a registry of their own (the core's is filled before the registry is
/// shared), in declaration order.
#[derive(Debug, Default)]
pub(super) struct ProviderFamilies {
    registry: Registry,
    by_name: BTreeMap<&'static str, (ProviderFamily, Series)>,
    order: Vec<&'static str>,
}

impl ProviderFamilies {
    pub(super) fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The series of `family`, declared now unless it already is.
    fn declare(&mut self, family: &ProviderFamily) -> Result<Series, MetricsError> {
        if let Some((declared, series)) = self.by_name.get(family.name) {
            return if declared == family {
                Ok(series.clone())
            } else {
                Err(MetricsError::NameTaken {
                    name: family.name.to_owned(),
                    by: "with another type, labels, help or buckets",
                })
            };
        }
        family.check()?;
        if Metrics::descriptors().iter().any(|d| d.name == family.name) {
            return Err(MetricsError::NameTaken { name: family.name.to_owned(), by: "by the core registry" });
        }
        let (name, help) = (family.registered_name(), family.help);
        let series = match family.kind {
            ProviderFamilyKind::Counter => {
                let f = CounterFamily::default();
                self.registry.register(name, help, f.clone());
                Series::Counter(f)
            }
            ProviderFamilyKind::Gauge => {
                let f = GaugeFamily::default();
                self.registry.register(name, help, f.clone());
                Series::Gauge(f)
            }
            ProviderFamilyKind::Histogram(buckets) => {
                let f = BucketedHistogramFamily::new_with_constructor(Buckets(buckets));
                self.registry.register(name, help, f.clone());
                Series::Histogram(f)
            }
        };
        self.by_name.insert(family.name, (*family, series.clone()));
        self.order.push(family.name);
        Ok(series)
    }

    fn descriptors(&self) -> Vec<MetricDescriptor> {
        self.order.iter().filter_map(|n| self.by_name.get(n)).map(|(f, _)| f.descriptor()).collect()
    }
}

impl Metrics {
    /// Declares a provider's families (see the module docs): each is served from now on, under its name, type,
    /// labels and help. Declaring a family again is a no-op. Fails, declaring none of the families after it,
    /// when one cannot be served as declared or its name is taken (by a core family or a different declaration).
    pub fn declare(&self, families: &[ProviderFamily]) -> Result<(), MetricsError> {
        let mut declared = self.provider.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        families.iter().try_for_each(|f| declared.declare(f).map(drop))
    }

    /// The families providers declared, in declaration order.
    pub fn provider_descriptors(&self) -> Vec<MetricDescriptor> {
        self.provider.lock().unwrap_or_else(std::sync::PoisonError::into_inner).descriptors()
    }

    fn provider_series<const N: usize>(
        &self,
        family: &ProviderFamily,
        values: [&str; N],
    ) -> Result<(Series, Labels), MetricsError> {
        if family.labels.len() != N {
            return Err(MetricsError::LabelCount {
                name: family.name.to_owned(),
                labels: family.labels.len(),
                values: N,
            });
        }
        let series = self.provider.lock().unwrap_or_else(std::sync::PoisonError::into_inner).declare(family)?;
        Ok((series, labels(family.labels, &values)))
    }

    fn wrong_type(family: &ProviderFamily, asked: MetricType) -> MetricsError {
        MetricsError::WrongType {
            name: family.name.to_owned(),
            declared: family.kind.metric_type().as_str(),
            asked: asked.as_str(),
        }
    }

    /// The series of a provider's counter with these label values (in the family's label order), declaring
    /// the family on first use.
    pub fn provider_counter<const N: usize>(
        &self,
        family: &ProviderFamily,
        values: [&str; N],
    ) -> Result<Counter, MetricsError> {
        match self.provider_series(family, values)? {
            (Series::Counter(f), labels) => Ok(f.get_or_create_owned(&labels)),
            _ => Err(Self::wrong_type(family, MetricType::Counter)),
        }
    }

    /// The series of a provider's gauge with these label values (see [`Metrics::provider_counter`]).
    pub fn provider_gauge<const N: usize>(
        &self,
        family: &ProviderFamily,
        values: [&str; N],
    ) -> Result<FloatGauge, MetricsError> {
        match self.provider_series(family, values)? {
            (Series::Gauge(f), labels) => Ok(f.get_or_create_owned(&labels)),
            _ => Err(Self::wrong_type(family, MetricType::Gauge)),
        }
    }

    /// The series of a provider's histogram with these label values (see [`Metrics::provider_counter`]).
    pub fn provider_histogram<const N: usize>(
        &self,
        family: &ProviderFamily,
        values: [&str; N],
    ) -> Result<Histogram, MetricsError> {
        match self.provider_series(family, values)? {
            (Series::Histogram(f), labels) => Ok(f.get_or_create_owned(&labels)),
            _ => Err(Self::wrong_type(family, MetricType::Histogram)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{BuildInfo, SIZE_BUCKETS};

    const JOBS: ProviderFamily = ProviderFamily {
        name: "karpenter_toy_jobs_total",
        kind: ProviderFamilyKind::Counter,
        labels: &["zone", "result"],
        help: "Jobs the toy cloud ran, by zone and result.",
    };
    const QUEUE: ProviderFamily = ProviderFamily {
        name: "karpenter_toy_queue_length",
        kind: ProviderFamilyKind::Gauge,
        labels: &[],
        help: "Requests waiting in the toy cloud's queue.",
    };
    const BATCH: ProviderFamily = ProviderFamily {
        name: "karpenter_toy_batch_size",
        kind: ProviderFamilyKind::Histogram(SIZE_BUCKETS),
        labels: &["batcher"],
        help: "Requests per toy batch.",
    };

    #[test]
    fn declared_families_are_served_in_the_text_exposition() {
        let metrics = Metrics::new(&BuildInfo::default());
        metrics.declare(&[JOBS, QUEUE, BATCH]).expect("valid families");
        metrics.declare(&[JOBS]).expect("declaring again is a no-op");
        metrics.provider_counter(&JOBS, ["a", "ok"]).expect("a counter").inc();
        metrics.provider_gauge(&QUEUE, []).expect("a gauge").set(3.0);
        metrics.provider_histogram(&BATCH, ["create"]).expect("a histogram").observe(3.0);
        let text = metrics.render();
        let expected = "# HELP karpenter_toy_jobs Jobs the toy cloud ran, by zone and result..\n\
                        # TYPE karpenter_toy_jobs counter\n\
                        karpenter_toy_jobs_total{zone=\"a\",result=\"ok\"} 1\n\
                        # HELP karpenter_toy_queue_length Requests waiting in the toy cloud's queue..\n\
                        # TYPE karpenter_toy_queue_length gauge\n\
                        karpenter_toy_queue_length{} 3.0\n\
                        # HELP karpenter_toy_batch_size Requests per toy batch..\n\
                        # TYPE karpenter_toy_batch_size histogram\n\
                        karpenter_toy_batch_size_sum{batcher=\"create\"} 3.0\n\
                        karpenter_toy_batch_size_count{batcher=\"create\"} 1\n\
                        karpenter_toy_batch_size_bucket{le=\"1.0\",batcher=\"create\"} 0\n\
                        karpenter_toy_batch_size_bucket{le=\"2.0\",batcher=\"create\"} 0\n\
                        karpenter_toy_batch_size_bucket{le=\"4.0\",batcher=\"create\"} 1\n";
        assert!(text.contains(expected), "{text}");
        assert!(text.ends_with("# EOF\n") && text.matches("# EOF").count() == 1, "one exposition");
        let names: Vec<String> = metrics.provider_descriptors().into_iter().map(|d| d.name).collect();
        assert_eq!(names, [JOBS.name, QUEUE.name, BATCH.name], "in declaration order");
        assert!(!Metrics::descriptors().iter().any(|d| d.name == JOBS.name), "the core does not declare them");
    }

    #[test]
    fn a_family_is_declared_on_first_use() {
        let metrics = Metrics::new(&BuildInfo::default());
        metrics.provider_counter(&JOBS, ["b", "failed"]).expect("declared now").inc_by(2);
        assert!(metrics.render().contains("karpenter_toy_jobs_total{zone=\"b\",result=\"failed\"} 2\n"));
        assert_eq!(metrics.provider_descriptors(), [JOBS.descriptor()]);
    }

    #[test]
    fn conflicts_and_malformed_families_are_errors_naming_the_family() {
        let metrics = Metrics::new(&BuildInfo::default());
        metrics.declare(&[JOBS]).expect("valid");
        let other_help = ProviderFamily { help: "Something else.", ..JOBS };
        let err = metrics.declare(&[other_help]).unwrap_err();
        assert!(matches!(err, MetricsError::NameTaken { .. }), "{err}");
        assert!(err.to_string().contains("karpenter_toy_jobs_total"), "{err}");
        let core = ProviderFamily { name: "karpenter_nodes_created_total", ..JOBS };
        assert_eq!(
            metrics.declare(&[core]).unwrap_err().to_string(),
            "metric family `karpenter_nodes_created_total` is already declared by the core registry"
        );
        let gauge_named_total = ProviderFamily { kind: ProviderFamilyKind::Gauge, ..JOBS };
        assert!(matches!(metrics.declare(&[gauge_named_total]), Err(MetricsError::NameTaken { .. })));
        for bad in [
            ProviderFamily { name: "karpenter_toy_gauge_total", ..QUEUE },
            ProviderFamily { name: "karpenter_toy_jobs", ..JOBS },
            ProviderFamily { name: "karpenter-toy", ..QUEUE },
            ProviderFamily { labels: &["zone", "zone"], ..QUEUE },
            ProviderFamily { labels: &["1st"], ..QUEUE },
            ProviderFamily { labels: &["le"], ..BATCH },
            ProviderFamily { kind: ProviderFamilyKind::Histogram(&[2.0, 1.0]), ..BATCH },
            ProviderFamily { kind: ProviderFamilyKind::Histogram(&[]), ..BATCH },
        ] {
            let err = metrics.declare(&[bad]).unwrap_err();
            assert!(matches!(err, MetricsError::InvalidFamily { .. }), "{bad:?}: {err}");
        }
        assert!(matches!(metrics.provider_counter(&JOBS, ["a"]), Err(MetricsError::LabelCount { .. })));
        let err = metrics.provider_gauge(&JOBS, ["a", "ok"]).unwrap_err();
        assert_eq!(err.to_string(), "metric family `karpenter_toy_jobs_total` is a counter, not a gauge");
        assert_eq!(metrics.provider_descriptors(), [JOBS.descriptor()], "nothing else was declared");
    }
}
