//! The cloud providers this binary runs, in one table ([`PROVIDERS`]): for each, its well-known labels (whose
//! name is its `--provider` value), the node-class kinds it hands the operator ([`NodeClassRegistration`]), the
//! checks of `run`'s flags it needs, and how `run` starts it and builds the controller manager around it.
//!
//! The operator and the commands name no provider: they take what an entry gives. Adding a provider is its
//! crate and one entry here; a crate offering the usual registration functions takes one line,
//! `provider_crate!`. The example cloud (examples/toy-cloud) is plugged in that way with the
//! `example-toy-cloud` cargo feature, which only exists to compile and test that line.

use std::sync::{Arc, LazyLock};

use anyhow::Context;
use clap::ValueEnum;
use clap::builder::PossibleValue;
use futures::future::LocalBoxFuture;
use karpenter_api::{NodeClassApis, ProviderLabels};
use karpenter_cloudprovider::{Clock, CloudProvider};
use karpenter_kwok::{KwokCloudProvider, KwokOptions};
use karpenter_operator::CoreSettings;
use karpenter_operator::manager::Manager;
use karpenter_operator::metrics::Metrics;
use karpenter_operator::node_classes::{KubeNodeClasses, NodeClassRegistration};
use tokio_util::sync::CancellationToken;

use crate::run::RunArgs;

/// `--provider`: which cloud provider a command works for, an entry of [`PROVIDERS`] (by position). Its values
/// are the entries' names, so the table is the one list of providers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Provider(usize);

/// Every entry's name, once per process. Leaked because clap's possible values borrow `&'static str` and each
/// name lives in the `ProviderLabels` its entry builds; a few bytes per provider.
static NAMES: LazyLock<Vec<&'static str>> =
    LazyLock::new(|| PROVIDERS.iter().map(|e| &*Box::leak((e.labels)().name.into_boxed_str())).collect());

/// Every provider, in table order (what `value_variants` lends out).
static ALL: LazyLock<Vec<Provider>> = LazyLock::new(|| (0..PROVIDERS.len()).map(Provider).collect());

impl ValueEnum for Provider {
    fn value_variants<'a>() -> &'a [Self] {
        &ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.name()))
    }
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What `run` hands a provider's entry to start it.
pub(crate) struct Start<'a> {
    pub(crate) args: &'a RunArgs,
    pub(crate) core: CoreSettings,
    pub(crate) client: kube::Client,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) shutdown: CancellationToken,
    /// The registry the manager serves; a provider records its own families into it.
    #[cfg_attr(not(feature = "aws"), expect(dead_code, reason = "only the AWS provider records families of its own"))]
    pub(crate) metrics: Arc<Metrics>,
    /// The API server as the errors name it (`the Kubernetes API server <url> (<config source>)`).
    pub(crate) server: String,
}

/// One provider (see the module docs).
pub(crate) struct ProviderEntry {
    /// Its name (its `--provider` value), well-known labels and restricted label domains (validate, crds,
    /// simulate).
    pub(crate) labels: fn() -> ProviderLabels,
    /// The node-class kinds the operator takes from it.
    pub(crate) node_classes: fn() -> Vec<NodeClassRegistration>,
    /// Its NodeClass APIs (validation and CRDs of its node classes: validate, crds, simulate).
    pub(crate) node_class_apis: fn() -> NodeClassApis,
    /// A usage error in `run`'s flags for this provider (exit status 2), found before anything starts.
    pub(crate) usage_error: fn(&RunArgs) -> Option<String>,
    /// What must hold before anything starts, else `run` fails (exit status 1).
    pub(crate) preflight: fn(&RunArgs) -> anyhow::Result<()>,
    /// Starts the provider (its node-class watch, its own controllers) and builds the manager around it. The
    /// caller adds the node-class registrations, the leader client and the metrics registry. The future need not
    /// be `Send` (`run` awaits it on its own task): the AWS assembly holds its controllers' futures across awaits.
    pub(crate) manager: for<'a> fn(Start<'a>) -> LocalBoxFuture<'a, anyhow::Result<Manager>>,
}

/// The entry of a provider crate that offers, at its root, the registration functions the table calls:
/// `labels()`, `node_classes()`, `node_class_apis()` and `async fn manager(settings, client, clock, shutdown,
/// options) -> Result<Manager, E>` (options started from their `Default`, `E` an error the binary reports with
/// where the API server is). Such a provider takes no flags of its own: `run` refuses kwok's flags for it and
/// checks nothing else before it starts.
#[cfg_attr(
    not(feature = "example-toy-cloud"),
    expect(unused_macros, reason = "only the example cloud's entry uses it")
)]
macro_rules! provider_crate {
    ($krate:ident) => {
        ProviderEntry {
            labels: $krate::labels,
            node_classes: $krate::node_classes,
            node_class_apis: $krate::node_class_apis,
            usage_error: kwok_flags_refused,
            preflight: |_| Ok(()),
            manager: |start| {
                Box::pin(async move {
                    let Start { core, client, clock, shutdown, server, .. } = start;
                    let manager = $krate::manager(core, client, clock, shutdown, Default::default());
                    manager.await.with_context(|| format!("starting the provider against {server}"))
                })
            },
        }
    };
}

/// Every provider this binary runs, one entry each.
pub(crate) static PROVIDERS: &[ProviderEntry] = &[
    ProviderEntry {
        labels: karpenter_kwok::labels::provider_labels,
        node_classes: kwok::node_classes,
        node_class_apis: karpenter_kwok::api::node_class_apis,
        usage_error: |_| None,
        preflight: |_| Ok(()),
        manager: |start| Box::pin(kwok::manager(start)),
    },
    ProviderEntry {
        labels: karpenter_aws::labels::provider_labels,
        node_classes: aws::node_classes,
        node_class_apis: karpenter_aws::api::node_class_apis,
        usage_error: aws::usage_error,
        preflight: aws::preflight,
        manager: |start| Box::pin(aws::manager(start)),
    },
    #[cfg(feature = "example-toy-cloud")]
    provider_crate!(karpenter_example_toy_cloud),
];

/// `run`'s kwok-only flags given to another provider: a usage error rather than flags silently doing nothing.
fn kwok_flags_refused(args: &RunArgs) -> Option<String> {
    let provider = args.provider.name();
    (args.instance_types.is_some() || args.kwok_simulate_kubelet)
        .then(|| format!("--instance-types and --kwok-simulate-kubelet apply to --provider kwok only, not {provider}"))
}

impl Provider {
    /// Its entry in [`PROVIDERS`].
    pub(crate) fn entry(self) -> &'static ProviderEntry {
        &PROVIDERS[self.0]
    }

    /// Its name, the `--provider` value (its labels' name).
    pub(crate) fn name(self) -> &'static str {
        NAMES[self.0]
    }

    /// The provider whose `--provider` value is `name`.
    #[cfg(test)]
    pub(crate) fn named(name: &str) -> Option<Self> {
        NAMES.iter().position(|n| *n == name).map(Provider)
    }

    /// Its well-known labels.
    pub(crate) fn labels(self) -> ProviderLabels {
        (self.entry().labels)()
    }

    /// The node classes it serves (their CRDs are what `crds` prints).
    pub(crate) fn node_classes(self) -> NodeClassApis {
        (self.entry().node_class_apis)()
    }
}

/// kwok: Nodes without machines; its node classes need no cloud resources, so they are ready on sight.
mod kwok {
    use super::*;
    use karpenter_kwok::api::KWOKNodeClass;

    pub(super) fn node_classes() -> Vec<NodeClassRegistration> {
        vec![NodeClassRegistration::of::<KWOKNodeClass>().ready_on_sight()]
    }

    pub(super) async fn manager(start: Start<'_>) -> anyhow::Result<Manager> {
        let Start { args, core, client, clock, shutdown, metrics: _, server } = start;
        let node_classes = KubeNodeClasses::new();
        if let Err(e) = node_classes.start::<KWOKNodeClass>(client.clone(), shutdown.clone()).await {
            // Only a 404 says the resource is unknown to the server; anything else is about reaching it.
            let hint = if matches!(&e, kube::Error::Api(s) if s.code == 404) {
                " (the kwok CRDs are not installed: `karpenter-controller crds --provider kwok | kubectl apply -f -`)"
            } else {
                ""
            };
            return Err(anyhow::Error::new(e).context(format!("listing KWOKNodeClasses from {server}{hint}")));
        }
        let mut kwok_options = match &args.instance_types {
            Some(path) => KwokOptions::from_instance_types_file(path)?,
            None => KwokOptions::default(),
        };
        kwok_options.node_classes = Some(Arc::new(node_classes.clone()));
        let cloud: Arc<dyn CloudProvider> = Arc::new(KwokCloudProvider::new(client.clone(), kwok_options));
        let mut manager = Manager::new(core, client.clone(), cloud, Arc::new(node_classes), clock);
        if args.kwok_simulate_kubelet {
            let kubelet = karpenter_kwok::simulate_kubelet(client, shutdown);
            manager = manager.with_controller("kwok.kubelet", Box::pin(kubelet));
        }
        Ok(manager)
    }
}

/// AWS: the provider's status controller writes its node classes' readiness; the operator records their
/// status-condition metrics, as upstream's AWS provider does.
mod aws {
    use super::*;
    use karpenter_aws::api::EC2NodeClass;

    pub(super) fn node_classes() -> Vec<NodeClassRegistration> {
        vec![NodeClassRegistration::of::<EC2NodeClass>().with_status_metrics()]
    }

    pub(super) fn usage_error(args: &RunArgs) -> Option<String> {
        if !cfg!(feature = "aws") {
            return Some(
                "--provider aws needs a karpenter-controller built with the `aws` cargo feature \
                 (cargo build -p karpenter-controller --features aws); this build only has the kwok provider"
                    .into(),
            );
        }
        if let Some(message) = kwok_flags_refused(args) {
            return Some(message);
        }
        args.aws.validate().err().map(|e| e.to_string())
    }

    /// A malformed price file stops the controller before it starts anything.
    pub(super) fn preflight(args: &RunArgs) -> anyhow::Result<()> {
        args.aws.check_price_file().context("PRICE_FILE")?;
        Ok(())
    }

    #[cfg(feature = "aws")]
    pub(super) async fn manager(start: Start<'_>) -> anyhow::Result<Manager> {
        let Start { args, core, client, clock, shutdown, metrics, server: _ } = start;
        let (runtime, node_classes) =
            crate::aws::start(&core, &args.aws, client.clone(), clock.clone(), shutdown, metrics).await?;
        let mut manager = Manager::new(core, client, runtime.cloud_provider, node_classes, clock);
        if let Some(source) = runtime.interruption {
            manager = manager.with_interruption(source);
        }
        manager = manager.with_interruption(runtime.instance_status);
        for (i, controller) in runtime.controllers.into_iter().enumerate() {
            manager = manager.with_controller(format!("aws.{i}"), controller);
        }
        Ok(manager)
    }

    #[cfg(not(feature = "aws"))]
    pub(super) async fn manager(_start: Start<'_>) -> anyhow::Result<Manager> {
        anyhow::bail!("--provider aws needs the `aws` cargo feature")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table is the list of `--provider` values: one per entry, each its labels' name, none twice.
    #[test]
    fn every_entry_is_one_provider_value() {
        let names: Vec<&str> = Provider::value_variants().iter().map(|p| p.name()).collect();
        assert_eq!(names.len(), PROVIDERS.len());
        for (i, entry) in PROVIDERS.iter().enumerate() {
            let provider = Provider::named(&(entry.labels)().name).expect("each entry's name is a --provider value");
            assert_eq!(provider, Provider(i));
            assert!(std::ptr::eq(provider.entry(), entry));
        }
        assert_eq!(names[..2], ["kwok", "aws"]);
        if cfg!(feature = "example-toy-cloud") {
            assert_eq!(names[2..], ["toy"]);
        }
    }

    /// Each provider hands the operator its node-class kind, with what upstream does for it: kwok's are ready
    /// on sight (`kwoknodeclass.status`), AWS's get `operatorpkg.ec2nodeclass.status` metrics.
    #[test]
    fn each_provider_registers_its_node_class_kind() {
        let kinds = |p: Provider| -> Vec<(String, String, bool, bool)> {
            (p.entry().node_classes)()
                .into_iter()
                .map(|r| {
                    (r.api_resource.group.clone(), r.api_resource.kind.clone(), r.ready_on_sight, r.status_metrics)
                })
                .collect()
        };
        let named = |name| Provider::named(name).expect("a provider");
        assert_eq!(kinds(named("kwok")), [("karpenter.kwok.sh".into(), "KWOKNodeClass".into(), true, false)]);
        assert_eq!(kinds(named("aws")), [("karpenter.k8s.aws".into(), "EC2NodeClass".into(), false, true)]);
        for p in Provider::value_variants() {
            let labels = p.labels();
            let flag = p.to_possible_value().expect("a --provider value");
            assert_eq!(labels.name, flag.get_name(), "the provider's name is its --provider value");
            for kind in (p.entry().node_classes)() {
                let group = &kind.api_resource.group;
                assert!(labels.restricted_domains.contains(group), "{p:?}: {group} is its own domain");
            }
        }
    }
}
