//! The AMI-family expectations of the upstream AWS provider (docs/upstream-aws-expectations.md, rows AF-AMI-*),
//! restated as our own table-driven tests against [`super::ami`] and the in-memory AWS ([`super::mock::MockAws`]).
//!
//! Each table row names the AF-AMI row it pins. Requirements are compared as sets: the order of the requirements
//! of one AMI carries no meaning (they are ANDed), and ours differs from upstream's status order.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::api::{AmiSelectorTerm, EC2NodeClassSpec, NodeSelectorRequirement};
use crate::testing::{EC2NodeClassOptions, ec2_node_class};
use chrono::{DateTime, TimeZone, Utc};
use karpenter_cloudprovider::Clock;
use karpenter_testing::FakeClock;

use super::ami::*;
use super::api::*;
use super::mock::MockAws;
use crate::api_error::AwsApiError;

// ---------------------------------------------------------------------------------------------------------------
// Fixtures.
// ---------------------------------------------------------------------------------------------------------------

const ARCH: &str = "kubernetes.io/arch";
const GPUS: &str = "karpenter.k8s.aws/instance-gpu-count";
const ACCELERATORS: &str = "karpenter.k8s.aws/instance-accelerator-count";

fn start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 3, 1, 12, 0, 0).unwrap()
}

fn run<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

/// An AMI provider over `aws` on `clock`, with the default one-minute refresh.
fn provider(aws: &Arc<MockAws>, clock: &FakeClock) -> AmiProvider {
    let clock: Arc<dyn Clock> = Arc::new(clock.clone());
    let ssm = Arc::new(SsmProvider::new(aws.clone(), clock.clone()));
    AmiProvider::new(aws.clone(), ssm, clock, Duration::from_secs(60))
}

fn image(id: &str, name: &str, arch: &str, created: &str, tags: &[(&str, &str)]) -> ImageDescription {
    ImageDescription {
        image_id: id.into(),
        name: Some(name.into()),
        architecture: arch.into(),
        creation_date: created.into(),
        deprecation_time: None,
        owner_id: Some("amazon".into()),
        tags: tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    }
}

/// Four images in the shape of the EKS-optimized ones: amd64 and arm64, each standard and NVIDIA; the arm64
/// image is newer than the amd64 one, the NVIDIA ones newer still.
fn four_images() -> Vec<ImageDescription> {
    let tags = [("team", "nodes")];
    vec![
        image("ami-x86", "eks-node-x86", "x86_64", "2024-05-01T08:00:00Z", &tags),
        image("ami-arm", "eks-node-arm", "arm64", "2024-05-01T08:01:00Z", &tags),
        image("ami-x86-gpu", "eks-node-x86-gpu", "x86_64", "2024-05-01T08:02:00Z", &tags),
        image("ami-arm-gpu", "eks-node-arm-gpu", "arm64", "2024-05-01T08:02:00Z", &tags),
    ]
}

fn world(images: Vec<ImageDescription>, parameters: &[(&str, &str)]) -> Arc<MockAws> {
    let aws = Arc::new(MockAws::new());
    aws.with(|w| {
        w.images = images;
        w.parameters = parameters.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    });
    aws
}

fn alias_spec(alias: &str) -> EC2NodeClassSpec {
    ec2_node_class(EC2NodeClassOptions { ami_alias: Some(alias.into()), ..Default::default() }).spec
}

fn terms_spec(terms: Vec<AmiSelectorTerm>) -> EC2NodeClassSpec {
    ec2_node_class(EC2NodeClassOptions {
        ami_selector_terms: terms,
        ami_family: Some("AL2023".into()),
        ..Default::default()
    })
    .spec
}

fn id_term(id: &str) -> AmiSelectorTerm {
    AmiSelectorTerm { id: Some(id.into()), ..Default::default() }
}

fn name_term(name: &str, owner: Option<&str>) -> AmiSelectorTerm {
    AmiSelectorTerm { name: Some(name.into()), owner: owner.map(Into::into), ..Default::default() }
}

fn owner_term(owner: &str) -> AmiSelectorTerm {
    AmiSelectorTerm { owner: Some(owner.into()), ..Default::default() }
}

fn tag_term(pairs: &[(&str, &str)]) -> AmiSelectorTerm {
    AmiSelectorTerm {
        tags: Some(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
        ..Default::default()
    }
}

fn ssm_term(name: &str) -> AmiSelectorTerm {
    AmiSelectorTerm { ssm_parameter: Some(name.into()), ..Default::default() }
}

fn req_set(reqs: &[NodeSelectorRequirement]) -> BTreeSet<NodeSelectorRequirement> {
    reqs.iter().cloned().collect()
}

/// What an AMI is expected to serve, written out independently of [`Variant::requirements`].
#[derive(Clone, Copy, Debug)]
enum Serves {
    Standard(&'static str),
    Nvidia(&'static str),
    Neuron(&'static str),
    Windows(&'static str),
    ArchOnly(&'static str),
}

impl Serves {
    fn requirements(self) -> BTreeSet<NodeSelectorRequirement> {
        let arch = |a: &str| NodeSelectorRequirement::new(ARCH, "In", &[a]);
        let reqs = match self {
            Self::Standard(a) => vec![
                arch(a),
                NodeSelectorRequirement::new(GPUS, "DoesNotExist", &[]),
                NodeSelectorRequirement::new(ACCELERATORS, "DoesNotExist", &[]),
            ],
            Self::Nvidia(a) => vec![arch(a), NodeSelectorRequirement::new(GPUS, "Exists", &[])],
            Self::Neuron(a) => vec![arch(a), NodeSelectorRequirement::new(ACCELERATORS, "Exists", &[])],
            Self::Windows(build) => vec![
                arch("amd64"),
                NodeSelectorRequirement::new("kubernetes.io/os", "In", &["windows"]),
                NodeSelectorRequirement::new("node.kubernetes.io/windows-build", "In", &[build]),
            ],
            Self::ArchOnly(a) => vec![arch(a)],
        };
        req_set(&reqs)
    }
}

/// The resolved AMIs as a set of (id, requirement set).
fn served(amis: &[ResolvedAmi]) -> BTreeSet<(String, BTreeSet<NodeSelectorRequirement>)> {
    amis.iter().map(|a| (a.id.clone(), req_set(&a.requirements))).collect()
}

fn expected(pairs: &[(&str, Serves)]) -> BTreeSet<(String, BTreeSet<NodeSelectorRequirement>)> {
    pairs.iter().map(|(id, s)| (id.to_string(), s.requirements())).collect()
}

// ---------------------------------------------------------------------------------------------------------------
// AF-AMI-1..4, 11: which aliases a Kubernetes version supports (patch versions included).
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn af_ami_alias_support_depends_on_the_kubernetes_minor() {
    // (row, alias, Kubernetes version, supported)
    let cases = [
        ("AF-AMI-1", "al2@latest", "1.33.0", false),
        ("AF-AMI-2", "al2@latest", "1.34.2", false),
        ("AF-AMI-3", "al2@latest", "1.32.0", true),
        ("AF-AMI-4", "al2023@latest", "1.33.0", true),
        ("AF-AMI-11", "windows2025@latest", "1.34.0", false),
        ("AF-AMI-11", "windows2025@latest", "1.35.0", true),
        ("ours", "al2@latest", "1.32", true),
        ("ours", "al2@latest", "1.33", false),
    ];
    for (row, alias, version, supported) in cases {
        let spec = alias_spec(alias);
        let parsed = spec.alias().unwrap();
        // Every parameter the alias would read exists, so only the version decides.
        let aws = Arc::new(MockAws::new());
        let minor: String = version.split('.').take(2).collect::<Vec<_>>().join(".");
        if let Ok(params) = alias_parameters(&parsed, &minor) {
            aws.with(|w| {
                for (i, p) in params.iter().enumerate() {
                    w.parameters.insert(p.path.clone(), format!("ami-{i}"));
                }
            });
        }
        let clock = FakeClock::new(start());
        let result = run(provider(&aws, &clock).queries(&spec, version));
        if supported {
            let queries = result.unwrap_or_else(|e| panic!("{row}: {alias} on {version}: {e}"));
            assert_eq!(queries.len(), 1, "{row}: one image-id query for an alias");
            assert!(
                queries[0].request.filters.iter().any(|f| f.name == "image-id" && !f.values.is_empty()),
                "{row}: {queries:?}"
            );
        } else {
            assert!(
                matches!(result, Err(AmiError::UnsupportedAlias { .. })),
                "{row}: {alias} on {version} must be an unsupported alias, got {result:?}"
            );
            assert_eq!(aws.count("GetParameter"), 0, "{row}: nothing is read for an unsupported alias");
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// AF-AMI-5..10, 14..16: aliases through SSM, complete and partial.
// ---------------------------------------------------------------------------------------------------------------

/// (row, alias, Kubernetes version, SSM parameters, expected AMIs with what they serve).
type AliasCase = (&'static str, &'static str, &'static str, Vec<(String, &'static str)>, Vec<(&'static str, Serves)>);

#[test]
fn af_ami_aliases_resolve_through_their_ssm_parameters() {
    use Serves::*;
    let eks = "/aws/service/eks/optimized-ami";
    let br = "/aws/service/bottlerocket";
    let win = "/aws/service/ami-windows-latest";
    // (row, alias, Kubernetes version, parameters, expected AMIs with what they serve)
    let cases: Vec<AliasCase> = vec![
        (
            "AF-AMI-5",
            "al2@latest",
            "1.32",
            vec![
                (format!("{eks}/1.32/amazon-linux-2/recommended/image_id"), "ami-x86"),
                (format!("{eks}/1.32/amazon-linux-2-gpu/recommended/image_id"), "ami-x86-gpu"),
                (format!("{eks}/1.32/amazon-linux-2-arm64/recommended/image_id"), "ami-arm"),
            ],
            vec![
                ("ami-x86", Standard("amd64")),
                ("ami-arm", Standard("arm64")),
                ("ami-x86-gpu", Nvidia("amd64")),
                ("ami-x86-gpu", Neuron("amd64")),
            ],
        ),
        (
            "AF-AMI-6",
            "al2023@latest",
            "1.33",
            vec![
                (format!("{eks}/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id"), "ami-x86"),
                (format!("{eks}/1.33/amazon-linux-2023/arm64/standard/recommended/image_id"), "ami-arm"),
            ],
            vec![("ami-x86", Standard("amd64")), ("ami-arm", Standard("arm64"))],
        ),
        (
            "AF-AMI-7",
            "bottlerocket@latest",
            "1.33",
            vec![
                (format!("{br}/aws-k8s-1.33/x86_64/latest/image_id"), "ami-x86"),
                (format!("{br}/aws-k8s-1.33-nvidia/x86_64/latest/image_id"), "ami-x86-gpu"),
                (format!("{br}/aws-k8s-1.33/arm64/latest/image_id"), "ami-arm"),
                (format!("{br}/aws-k8s-1.33-nvidia/arm64/latest/image_id"), "ami-arm-gpu"),
            ],
            vec![
                ("ami-x86", Standard("amd64")),
                ("ami-x86", Neuron("amd64")),
                ("ami-x86-gpu", Nvidia("amd64")),
                ("ami-arm", Standard("arm64")),
                ("ami-arm-gpu", Nvidia("arm64")),
            ],
        ),
        (
            "AF-AMI-8",
            "windows2019@latest",
            "1.33",
            vec![(format!("{win}/Windows_Server-2019-English-Core-EKS_Optimized-1.33/image_id"), "ami-x86")],
            vec![("ami-x86", Windows("10.0.17763"))],
        ),
        (
            "AF-AMI-9",
            "windows2022@latest",
            "1.33",
            vec![(format!("{win}/Windows_Server-2022-English-Core-EKS_Optimized-1.33/image_id"), "ami-x86")],
            vec![("ami-x86", Windows("10.0.20348"))],
        ),
        (
            "AF-AMI-10",
            "windows2025@latest",
            "1.35",
            vec![(format!("{win}/Windows_Server-2025-English-Core-EKS_Optimized-1.35/image_id"), "ami-x86")],
            vec![("ami-x86", Windows("10.0.26100"))],
        ),
        (
            "AF-AMI-14",
            "al2@latest",
            "1.32",
            vec![
                (format!("{eks}/1.32/amazon-linux-2/recommended/image_id"), "ami-x86"),
                (format!("{eks}/1.32/amazon-linux-2-arm64/recommended/image_id"), "ami-arm"),
            ],
            vec![("ami-x86", Standard("amd64")), ("ami-arm", Standard("arm64"))],
        ),
        (
            "AF-AMI-15",
            "al2023@latest",
            "1.33",
            vec![(format!("{eks}/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id"), "ami-x86")],
            vec![("ami-x86", Standard("amd64"))],
        ),
        (
            "AF-AMI-16",
            "bottlerocket@latest",
            "1.33",
            vec![
                (format!("{br}/aws-k8s-1.33/x86_64/latest/image_id"), "ami-x86"),
                (format!("{br}/aws-k8s-1.33-nvidia/x86_64/latest/image_id"), "ami-x86-gpu"),
                (format!("{br}/aws-k8s-1.33/arm64/latest/image_id"), "ami-arm"),
            ],
            vec![
                ("ami-x86", Standard("amd64")),
                ("ami-x86", Neuron("amd64")),
                ("ami-x86-gpu", Nvidia("amd64")),
                ("ami-arm", Standard("arm64")),
            ],
        ),
        (
            "ours: pinned AL2023 version",
            "al2023@v20240807",
            "1.31",
            vec![(
                format!(
                    "{eks}/1.31/amazon-linux-2023/arm64/nvidia/{}/image_id",
                    "amazon-eks-node-al2023-arm64-nvidia-1.31-v20240807"
                ),
                "ami-arm-gpu",
            )],
            vec![("ami-arm-gpu", Nvidia("arm64"))],
        ),
        (
            // Upstream keeps one parameter's variants per image (whichever its map visits last); we keep all.
            "ours: one image behind two parameters serves both variants",
            "al2023@latest",
            "1.33",
            vec![
                (format!("{eks}/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id"), "ami-x86"),
                (format!("{eks}/1.33/amazon-linux-2023/x86_64/neuron/recommended/image_id"), "ami-x86"),
            ],
            vec![("ami-x86", Standard("amd64")), ("ami-x86", Neuron("amd64"))],
        ),
        (
            "ours: pinned Bottlerocket version without its v",
            "bottlerocket@v1.26.1",
            "1.31",
            vec![(format!("{br}/aws-k8s-1.31/arm64/1.26.1/image_id"), "ami-arm")],
            vec![("ami-arm", Standard("arm64"))],
        ),
    ];
    for (row, alias, version, params, want) in cases {
        let params: Vec<(&str, &str)> = params.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        let aws = world(four_images(), &params);
        let clock = FakeClock::new(start());
        let amis = run(provider(&aws, &clock).resolve(&alias_spec(alias), version))
            .unwrap_or_else(|e| panic!("{row}: {alias}: {e}"));
        assert_eq!(amis.len(), want.len(), "{row}: {alias}: {amis:#?}");
        assert_eq!(served(&amis), expected(&want), "{row}: {alias}");
        assert_eq!(aws.count("DescribeImages"), 1, "{row}: one DescribeImages for the alias");
    }
}

#[test]
fn af_ami_alias_without_any_parameter_is_an_error() {
    for alias in ["al2@latest", "al2023@latest", "bottlerocket@latest", "windows2022@latest"] {
        let aws = world(four_images(), &[]);
        let clock = FakeClock::new(start());
        let result = run(provider(&aws, &clock).resolve(&alias_spec(alias), "1.32"));
        assert!(matches!(result, Err(AmiError::NoParameters(_))), "{alias}: {result:?}");
        assert_eq!(aws.count("DescribeImages"), 0, "{alias}: nothing to describe");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// AF-AMI-12: concurrent resolutions.
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn af_ami_concurrent_resolutions_agree() {
    let aws = world(four_images(), &[]);
    let clock = FakeClock::new(start());
    let amis = Arc::new(provider(&aws, &clock));
    let spec = terms_spec(vec![id_term("ami-x86"), id_term("ami-arm")]);
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let (amis, spec) = (amis.clone(), spec.clone());
            std::thread::spawn(move || {
                (0..50)
                    .map(|_| {
                        run(amis.resolve(&spec, "1.33"))
                            .unwrap()
                            .into_iter()
                            .map(|a| (a.id, a.name, a.creation_date, a.deprecated, a.requirements))
                            .collect::<Vec<_>>()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let arch = |a: &str| vec![NodeSelectorRequirement::new(ARCH, "In", &[a])];
    let want = vec![
        (
            "ami-arm".to_string(),
            Some("eks-node-arm".to_string()),
            "2024-05-01T08:01:00Z".to_string(),
            false,
            arch("arm64"),
        ),
        (
            "ami-x86".to_string(),
            Some("eks-node-x86".to_string()),
            "2024-05-01T08:00:00Z".to_string(),
            false,
            arch("amd64"),
        ),
    ];
    for t in threads {
        for got in t.join().expect("no resolution panics") {
            assert_eq!(got, want, "newest first, each with its architecture only");
        }
    }
    // Threads that miss the empty cache at the same moment each ask EC2 (the cache does not merge concurrent
    // misses), so the count is at most one per thread; once filled, the cache serves every resolution.
    let calls = aws.count("DescribeImages");
    assert!((1..=16).contains(&calls), "{calls} DescribeImages calls for 800 resolutions");
    run(amis.resolve(&spec, "1.33")).unwrap();
    assert_eq!(aws.count("DescribeImages"), calls, "a filled cache serves the resolution");
}

// ---------------------------------------------------------------------------------------------------------------
// AF-AMI-13: only available images.
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn af_ami_every_query_asks_ec2_for_available_images_only() {
    // MockAws has no image state (everything it holds is available), so the rule is pinned where it lives: in
    // every DescribeImages request, where EC2 applies it.
    let aws = world(
        four_images(),
        &[
            ("/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id", "ami-x86"),
            ("/team/ami", "ami-arm"),
        ],
    );
    let clock = FakeClock::new(start());
    let p = provider(&aws, &clock);
    let specs = [
        ("alias", alias_spec("al2023@latest")),
        ("id", terms_spec(vec![id_term("ami-x86")])),
        ("ssmParameter", terms_spec(vec![ssm_term("/team/ami")])),
        ("name", terms_spec(vec![name_term("eks-node-*", None)])),
        ("tags", terms_spec(vec![tag_term(&[("team", "nodes")])])),
        ("owner", terms_spec(vec![owner_term("amazon")])),
    ];
    let available = Filter::new("state", ["available"]);
    for (what, spec) in specs {
        let queries = run(p.queries(&spec, "1.33")).unwrap();
        assert!(!queries.is_empty(), "{what}");
        for q in queries {
            assert!(q.request.filters.contains(&available), "{what}: {:?}", q.request);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// AF-AMI-17: tags select, they never constrain.
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn af_ami_image_tags_are_not_requirements() {
    let tagged = image(
        "ami-tagged",
        "tagged",
        "x86_64",
        "2025-02-01T00:00:00Z",
        &[
            ("Name", "tagged"),
            ("node.kubernetes.io/instance-type", "m5.large"),
            ("topology.kubernetes.io/zone", "test-zone-1a"),
        ],
    );
    let aws = world(vec![tagged], &[]);
    let clock = FakeClock::new(start());
    let p = provider(&aws, &clock);
    // `{"*": "*"}` asks EC2 for any image with any tag key.
    let any = run(p.queries(&terms_spec(vec![tag_term(&[("*", "*")])]), "1.33")).unwrap();
    assert_eq!(any.len(), 1);
    assert!(any[0].request.filters.contains(&Filter::new("tag-key", ["*"])), "{:?}", any[0].request);
    // MockAws matches tag keys literally, so the image is selected by a key it carries.
    let amis =
        run(p.resolve(&terms_spec(vec![tag_term(&[("node.kubernetes.io/instance-type", "*")])]), "1.33")).unwrap();
    assert_eq!(amis.len(), 1);
    assert_eq!(
        (amis[0].id.as_str(), amis[0].name.as_deref(), amis[0].creation_date.as_str(), amis[0].deprecated),
        ("ami-tagged", Some("tagged"), "2025-02-01T00:00:00Z", false)
    );
    assert_eq!(amis[0].requirements, vec![NodeSelectorRequirement::new(ARCH, "In", &["amd64"])]);
}

// ---------------------------------------------------------------------------------------------------------------
// AF-AMI-18..21: deprecated images.
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn af_ami_best_image_per_requirements_prefers_non_deprecated_then_newest() {
    // Candidate: (id, name, created, deprecation relative to now in minutes).
    type Candidate = (&'static str, &'static str, &'static str, Option<i64>);
    // (row, two amd64 candidates, expected id, expected deprecated)
    let cases: [(&str, [Candidate; 2], &str, bool); 5] = [
        (
            "AF-AMI-18",
            [
                ("ami-5678", "node", "2021-08-31T00:12:42.000Z", Some(-60)),
                ("ami-1234", "node", "2020-08-31T00:08:42.000Z", None),
            ],
            "ami-1234",
            false,
        ),
        (
            "AF-AMI-19",
            [
                ("ami-5678", "node", "2021-08-31T00:12:42.000Z", Some(-10)),
                ("ami-1234", "node", "2021-08-31T00:12:42.000Z", Some(10)),
            ],
            "ami-1234",
            false,
        ),
        (
            "AF-AMI-20",
            [
                ("ami-5678", "node-b", "2021-08-31T00:12:42.000Z", Some(-10)),
                ("ami-1234", "node-a", "2021-08-31T00:12:42.000Z", Some(10)),
            ],
            "ami-1234",
            false,
        ),
        (
            "AF-AMI-21",
            [
                ("ami-5678", "node", "2021-08-31T00:12:42.000Z", Some(-60)),
                ("ami-1234", "node", "2020-08-31T00:08:42.000Z", Some(-60)),
            ],
            "ami-5678",
            true,
        ),
        (
            "ours: equal but for the name, the greater name wins",
            [
                ("ami-1111", "node-2024a", "2021-08-31T00:12:42.000Z", None),
                ("ami-2222", "node-2024b", "2021-08-31T00:12:42.000Z", None),
            ],
            "ami-2222",
            false,
        ),
    ];
    for (row, candidates, want_id, want_deprecated) in cases {
        // Both input orders give the same answer.
        for order in [[0, 1], [1, 0]] {
            let images = order
                .iter()
                .map(|&i| {
                    let (id, name, created, deprecation) = candidates[i];
                    ImageDescription {
                        deprecation_time: deprecation.map(|m| {
                            (start() + chrono::Duration::minutes(m)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                        }),
                        ..image(id, name, "x86_64", created, &[("foo", "bar")])
                    }
                })
                .collect();
            let aws = world(images, &[]);
            let clock = FakeClock::new(start());
            let amis =
                run(provider(&aws, &clock).resolve(&terms_spec(vec![tag_term(&[("foo", "*")])]), "1.33")).unwrap();
            assert_eq!(amis.len(), 1, "{row}: one image per requirement set");
            assert_eq!(
                (amis[0].id.as_str(), amis[0].deprecated),
                (want_id, want_deprecated),
                "{row} (order {order:?})"
            );
            assert_eq!(amis[0].to_status().deprecated, want_deprecated, "{row}: status carries the flag");
            assert_eq!(amis[0].requirements, vec![NodeSelectorRequirement::new(ARCH, "In", &["amd64"])], "{row}");
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// AF-AMI-22..25: the resolution cache.
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn af_ami_resolutions_are_cached_per_selection() {
    let images = vec![
        image("ami-123", "ami-name-1", "x86_64", "2022-08-15T12:00:00Z", &[("test", "test")]),
        image("ami-456", "ami-name-2", "arm64", "2022-08-15T12:00:00Z", &[("test", "test")]),
    ];
    // (row, terms, DescribeImages calls of one resolution)
    let cases = [
        ("AF-AMI-22", vec![id_term("ami-123"), id_term("ami-456")], 1),
        ("AF-AMI-23", vec![name_term("ami-name-1", None), name_term("ami-name-2", None)], 2),
        ("AF-AMI-24", vec![tag_term(&[("test", "test")])], 1),
    ];
    for (row, terms, calls) in cases {
        let aws = world(images.clone(), &[]);
        let clock = FakeClock::new(start());
        let p = provider(&aws, &clock);
        let spec = terms_spec(terms);
        let first = run(p.resolve(&spec, "1.33")).unwrap();
        assert_eq!(aws.count("DescribeImages"), calls, "{row}");
        let ids: BTreeSet<&str> = first.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(ids, BTreeSet::from(["ami-123", "ami-456"]), "{row}");
        // The world changes, the cached answer stands until the refresh interval passes.
        aws.with(|w| w.images.clear());
        clock.step_secs(59);
        assert_eq!(run(p.resolve(&spec, "1.33")).unwrap(), first, "{row}: served from the cache");
        assert_eq!(aws.count("DescribeImages"), calls, "{row}: no call for a cached answer");
        clock.step_secs(2);
        assert!(run(p.resolve(&spec, "1.33")).unwrap().is_empty(), "{row}: re-described after the refresh");
        assert_eq!(aws.count("DescribeImages"), 2 * calls, "{row}");
    }
}

#[test]
fn af_ami_cache_keeps_and_and_or_tag_selections_apart() {
    let both = ("tag-key-1", "tag-value-1");
    let second = ("tag-key-2", "tag-value-2");
    let aws = world(vec![image("ami-789", "ami-name-3", "x86_64", "2022-08-15T12:00:00Z", &[both, second])], &[]);
    let clock = FakeClock::new(start());
    let p = provider(&aws, &clock);
    let and_spec = terms_spec(vec![tag_term(&[both, second])]);
    let or_spec = terms_spec(vec![tag_term(&[both]), tag_term(&[second])]);
    let names = |amis: &[ResolvedAmi]| -> BTreeSet<String> { amis.iter().filter_map(|a| a.name.clone()).collect() };

    let and_amis = run(p.resolve(&and_spec, "1.33")).unwrap();
    assert_eq!(names(&and_amis), BTreeSet::from(["ami-name-3".to_string()]), "AND: both tags on one image");
    // EC2 now holds other images, each with one of the tags.
    aws.with(|w| {
        w.images = vec![
            image("ami-123", "ami-name-1", "x86_64", "2022-08-15T12:00:00Z", &[both]),
            image("ami-456", "ami-name-2", "arm64", "2022-08-15T12:00:00Z", &[second]),
        ];
    });
    let or_amis = run(p.resolve(&or_spec, "1.33")).unwrap();
    assert_eq!(
        names(&or_amis),
        BTreeSet::from(["ami-name-1".to_string(), "ami-name-2".to_string()]),
        "OR: one term per tag"
    );
    let calls = aws.count("DescribeImages");
    assert_eq!(calls, 3, "one query for the AND term, one per OR term");
    // Two cache entries: each selection still gets its own answer, without a call.
    assert_eq!(run(p.resolve(&and_spec, "1.33")).unwrap(), and_amis);
    assert_eq!(run(p.resolve(&or_spec, "1.33")).unwrap(), or_amis);
    assert_eq!(aws.count("DescribeImages"), calls);
}

// ---------------------------------------------------------------------------------------------------------------
// AF-AMI-26..30: the DescribeImages queries of selector terms.
// ---------------------------------------------------------------------------------------------------------------

/// A query as data with order removed: sorted owners, and filters (without `state`) with sorted values.
type QueryShape = (BTreeSet<String>, BTreeSet<(String, BTreeSet<String>)>);

fn shape(q: &ImageQuery) -> QueryShape {
    (
        q.request.owners.iter().cloned().collect(),
        q.request
            .filters
            .iter()
            .filter(|f| f.name != "state")
            .map(|f| (f.name.clone(), f.values.iter().cloned().collect()))
            .collect(),
    )
}

fn want_shape(owners: &[&str], filters: &[(&str, &[&str])]) -> QueryShape {
    (
        owners.iter().map(|o| o.to_string()).collect(),
        filters.iter().map(|(n, vs)| (n.to_string(), vs.iter().map(|v| v.to_string()).collect())).collect(),
    )
}

#[test]
fn af_ami_selector_terms_become_describe_images_queries() {
    // (row, terms, expected queries as a multiset)
    let cases: Vec<(&str, Vec<AmiSelectorTerm>, Vec<QueryShape>)> = vec![
        ("AF-AMI-26", vec![tag_term(&[("Name", "my-ami")])], vec![want_shape(&[], &[("tag:Name", &["my-ami"])])]),
        ("AF-AMI-27", vec![name_term("my-ami", None)], vec![want_shape(&["amazon", "self"], &[("name", &["my-ami"])])]),
        (
            "AF-AMI-28",
            vec![id_term("ami-abcd1234"), id_term("ami-cafeaced")],
            vec![want_shape(&[], &[("image-id", &["ami-abcd1234", "ami-cafeaced"])])],
        ),
        (
            "AF-AMI-29",
            vec![owner_term("abcdef"), owner_term("123456789012")],
            vec![want_shape(&["abcdef"], &[]), want_shape(&["123456789012"], &[])],
        ),
        (
            "AF-AMI-30",
            vec![name_term("my-name", Some("0123456789")), name_term("my-name", Some("self"))],
            vec![
                want_shape(&["0123456789"], &[("name", &["my-name"])]),
                want_shape(&["self"], &[("name", &["my-name"])]),
            ],
        ),
        (
            "ours: tags with any value ask for the key",
            vec![tag_term(&[("team", "a"), ("any", "*")])],
            vec![want_shape(&[], &[("tag:team", &["a"]), ("tag-key", &["any"])])],
        ),
        (
            "ours: name, owner and tags in one term are one query",
            vec![AmiSelectorTerm {
                name: Some("base-*".into()),
                owner: Some("111122223333".into()),
                tags: Some(BTreeMap::from([("stage".to_string(), "prod".to_string())])),
                ..Default::default()
            }],
            vec![want_shape(&["111122223333"], &[("name", &["base-*"]), ("tag:stage", &["prod"])])],
        ),
    ];
    let aws = Arc::new(MockAws::new());
    let clock = FakeClock::new(start());
    let p = provider(&aws, &clock);
    for (row, terms, want) in cases {
        let queries = run(p.queries(&terms_spec(terms), "1.33")).unwrap();
        let mut got: Vec<QueryShape> = queries.iter().map(shape).collect();
        let mut want = want;
        got.sort();
        want.sort();
        assert_eq!(got, want, "{row}");
        assert!(queries.iter().all(|q| q.known_requirements.is_empty()), "{row}: terms carry no known requirements");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// AF-AMI-31..33: the order of the resolved AMIs.
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn af_ami_resolved_amis_are_sorted_newest_first_then_by_id() {
    // Each image serves its own requirement set, so all of them survive the per-set choice and only the sort
    // decides their order. Candidate: (id, name, created, deprecated).
    type Candidate = (&'static str, &'static str, &'static str, bool);
    let cases: Vec<(&str, Vec<Candidate>, Vec<&str>)> = vec![
        (
            "AF-AMI-31",
            vec![
                ("test-ami-1-id", "test-ami-1", "2021-08-31T00:10:42.000Z", false),
                ("test-ami-2-id", "test-ami-2", "2021-08-31T00:12:42.000Z", false),
                ("test-ami-3-id", "test-ami-3", "2021-08-31T00:08:42.000Z", false),
                ("test-ami-4-id", "test-ami-4", "", false),
            ],
            vec!["test-ami-2-id", "test-ami-1-id", "test-ami-3-id", "test-ami-4-id"],
        ),
        (
            "AF-AMI-32",
            vec![
                ("test-ami-4-id", "test-ami-1", "2021-08-31T00:10:42.000Z", false),
                ("test-ami-3-id", "test-ami-1", "2021-08-31T00:10:42.000Z", false),
                ("test-ami-2-id", "test-ami-1", "2021-08-31T00:10:42.000Z", false),
                ("test-ami-1-id", "test-ami-1", "2021-08-31T00:10:42.000Z", false),
            ],
            vec!["test-ami-1-id", "test-ami-2-id", "test-ami-3-id", "test-ami-4-id"],
        ),
        (
            "AF-AMI-33",
            vec![
                ("test-ami-4-id", "test-ami-1", "2021-08-31T00:10:42.000Z", true),
                ("test-ami-3-id", "test-ami-1", "2021-08-31T00:10:42.000Z", true),
                ("test-ami-2-id", "test-ami-1", "2021-08-31T00:10:42.000Z", true),
                ("test-ami-1-id", "test-ami-1", "2021-08-31T00:10:42.000Z", true),
            ],
            vec!["test-ami-1-id", "test-ami-2-id", "test-ami-3-id", "test-ami-4-id"],
        ),
        (
            // Deliberately unlike upstream, whose list is ordered by creation date alone: an instance type two
            // AMIs could serve launches the non-deprecated one (status order decides, spec §5).
            "ours: non-deprecated before deprecated, whatever their age",
            vec![
                ("ami-new-deprecated", "n", "2024-06-01T00:00:00Z", true),
                ("ami-old", "o", "2023-01-01T00:00:00Z", false),
                ("ami-older", "p", "2022-01-01T00:00:00Z", false),
            ],
            vec!["ami-old", "ami-older", "ami-new-deprecated"],
        ),
    ];
    let now = start();
    for (row, candidates, want) in cases {
        let mut query = ImageQuery::default();
        let images: Vec<ImageDescription> = candidates
            .iter()
            .map(|&(id, name, created, deprecated)| {
                query.known_requirements.insert(
                    id.to_string(),
                    vec![vec![
                        NodeSelectorRequirement::new(ARCH, "In", &["amd64"]),
                        NodeSelectorRequirement::new("example.com/slot", "In", &[id]),
                    ]],
                );
                ImageDescription {
                    deprecation_time: deprecated.then(|| "2020-01-01T00:00:00Z".to_string()),
                    ..image(id, name, "x86_64", created, &[])
                }
            })
            .collect();
        let amis = select_images(&[(query, images)], now);
        let got: Vec<&str> = amis.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(got, want, "{row}");
        let flags: Vec<bool> = amis.iter().map(|a| a.deprecated).collect();
        let mut sorted = flags.clone();
        sorted.sort();
        assert_eq!(flags, sorted, "{row}: deprecated ones last");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// AF-AMI-34..37: ssmParameter terms.
// ---------------------------------------------------------------------------------------------------------------

#[derive(Debug)]
enum SsmOutcome {
    /// The AMIs resolved, by id.
    Amis(&'static [&'static str]),
    /// Resolution fails with the GetParameter error.
    Fails(&'static str),
}

/// (row, parameter the term names, its stored value, the error GetParameter answers with, outcome).
type SsmCase = (&'static str, &'static str, Option<&'static str>, Option<&'static str>, SsmOutcome);

#[test]
fn af_ami_ssm_parameter_terms() {
    let al2 = "/aws/service/eks/optimized-ami/1.32/amazon-linux-2/recommended/image_id";
    let custom = "/my/custom/ami/parameter";
    let cases: [SsmCase; 7] = [
        ("AF-AMI-34", al2, Some("ami-x86"), None, SsmOutcome::Amis(&["ami-x86"])),
        ("AF-AMI-35", custom, Some("ami-x86"), None, SsmOutcome::Amis(&["ami-x86"])),
        ("AF-AMI-36", custom, None, None, SsmOutcome::Amis(&[])),
        (
            "AF-AMI-37",
            custom,
            Some("ami-x86"),
            Some("AccessDeniedException"),
            SsmOutcome::Fails("AccessDeniedException"),
        ),
        ("AF-AMI-37", custom, Some("ami-x86"), Some("ThrottlingException"), SsmOutcome::Fails("ThrottlingException")),
        ("ours: a value that is not an AMI id is skipped", custom, Some("hello"), None, SsmOutcome::Amis(&[])),
        (
            "ours: a not-found answer is skipped like a missing parameter",
            custom,
            Some("ami-x86"),
            Some("ParameterNotFound"),
            SsmOutcome::Amis(&[]),
        ),
    ];
    for (row, parameter, value, error, outcome) in cases {
        let params: Vec<(&str, &str)> = value.map(|v| (parameter, v)).into_iter().collect();
        let aws = world(four_images(), &params);
        if let Some(code) = error {
            aws.fail_next("GetParameter", AwsApiError::new("GetParameter", code, "injected"));
        }
        let clock = FakeClock::new(start());
        let result = run(provider(&aws, &clock).resolve(&terms_spec(vec![ssm_term(parameter)]), "1.32"));
        match outcome {
            SsmOutcome::Amis(ids) => {
                let amis = result.unwrap_or_else(|e| panic!("{row}: {e}"));
                assert_eq!(amis.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(), ids, "{row}");
                if let Some(a) = amis.first() {
                    assert_eq!(a.name.as_deref(), Some("eks-node-x86"), "{row}: the image's name");
                    assert_eq!(served(&amis), expected(&[("ami-x86", Serves::ArchOnly("amd64"))]), "{row}");
                }
            }
            SsmOutcome::Fails(code) => match result {
                Err(AmiError::Api(e)) => assert_eq!(e.code, code, "{row}"),
                other => panic!("{row}: expected the SSM error, got {other:?}"),
            },
        }
    }
}
