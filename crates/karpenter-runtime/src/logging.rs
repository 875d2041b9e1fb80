//! Structured JSON logs in upstream Karpenter's shape (zap's production encoder as upstream configures it), one
//! object per line:
//!
//! ```json
//! {"level":"INFO","time":"2024-01-01T00:00:00.000Z","logger":"controller","message":"created nodeclaim","commit":"abc1234","controller":"provisioner","NodePool":{"name":"default"},"NodeClaim":{"name":"default-x7b2k"}}
//! ```
//!
//! `level`, `time`, `logger` and `message` come first, then `commit`, then every field of the event and of the
//! spans it is in (outermost first; an inner field overrides an outer one), sorted by name. A string field named
//! like an object kind (an upper-camel-case name: `NodePool`, `NodeClaim`, `Node`, a provider's node class) is an
//! object reference, as upstream's (`klog.KObj`): `NodeClaim = "x"` becomes `{"name": "x"}` and
//! `Pod = "ns/name"` becomes `{"namespace": …, "name": …}`. The rule needs no list of kinds, so a provider's
//! kinds are logged the same way without the runtime knowing them. A `logger` field overrides the logger name
//! (default `controller`).
//!
//! `LOG_LEVEL` selects the levels: `debug` (DEBUG and up), `info` (INFO, WARN, ERROR), `error` (ERROR only).
//! Dependencies' chatter (hyper, tower, rustls, kube's HTTP spans) stays at INFO and above even with `debug`.
//! The layer is a plain `tracing_subscriber::Layer` ([`JsonLayer`]); the field formatting is our own because
//! tracing-subscriber's JSON formatter names its keys `timestamp`/`fields`/`target`, not upstream's.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use karpenter_cloudprovider::Clock;
use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Record};
use tracing::{Event, Id, Level, Subscriber};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// Log verbosity (`LOG_LEVEL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogLevel {
    /// DEBUG and up.
    Debug,
    /// INFO, WARN and ERROR.
    #[default]
    Info,
    /// ERROR only.
    Error,
}

impl std::str::FromStr for LogLevel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "debug" => Ok(Self::Debug),
            // Empty is upstream's default level (its logger reads "" as info).
            "info" | "" => Ok(Self::Info),
            "error" => Ok(Self::Error),
            _ => Err(format!("{s:?} is not a log level; use debug, info or error")),
        }
    }
}

/// What [`init`] installs: the level and where lines go.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogConfig {
    /// `LOG_LEVEL`.
    pub level: LogLevel,
    /// `LOG_OUTPUT_PATHS`: stdout, stderr or file paths.
    pub output_paths: Vec<String>,
    /// `LOG_ERROR_OUTPUT_PATHS`: where ERROR lines also go.
    pub error_output_paths: Vec<String>,
}

/// Where log lines go (`LOG_OUTPUT_PATHS` entries, or a buffer in tests).
#[derive(Debug, Clone)]
pub enum LogOutput {
    /// The process's standard output.
    Stdout,
    /// The process's standard error.
    Stderr,
    /// A file, appended to.
    File(Arc<Mutex<std::fs::File>>),
    /// Memory, for tests to read back.
    Buffer(Arc<Mutex<Vec<u8>>>),
}

impl LogOutput {
    /// `stdout`, `stderr`, or a file path (created or appended to).
    pub fn open(path: &str) -> std::io::Result<Self> {
        Ok(match path {
            "stdout" => Self::Stdout,
            "stderr" => Self::Stderr,
            _ => Self::File(Arc::new(Mutex::new(std::fs::OpenOptions::new().create(true).append(true).open(path)?))),
        })
    }

    /// Writes one whole line at once (lines of concurrent events never interleave). Failures are dropped: a
    /// logger has nowhere to report them.
    fn write_line(&self, line: &[u8]) {
        let _ = match self {
            Self::Stdout => std::io::stdout().lock().write_all(line),
            Self::Stderr => std::io::stderr().lock().write_all(line),
            Self::File(f) => f.lock().unwrap_or_else(PoisonError::into_inner).write_all(line),
            Self::Buffer(b) => {
                b.lock().unwrap_or_else(PoisonError::into_inner).extend_from_slice(line);
                Ok(())
            }
        };
    }
}

/// The level filter `LOG_LEVEL` means, with dependencies held at INFO.
pub fn filter(level: LogLevel) -> Targets {
    let ours = match level {
        LogLevel::Debug => LevelFilter::DEBUG,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Error => LevelFilter::ERROR,
    };
    let deps = ours.min(LevelFilter::INFO);
    let mut targets = Targets::new().with_default(ours);
    for noisy in ["hyper", "hyper_util", "tower", "tower_http", "rustls", "h2", "kube_client", "kube_runtime"] {
        targets = targets.with_target(noisy, deps);
    }
    // kube-client's tracing layer logs every failed HTTP attempt at ERROR, retries included: 45-104 lines for a
    // 3 s apiserver restart. The controller reports each failure that matters itself (a reconcile retried, a
    // watch re-listed), with the object it concerns; at debug level the per-request lines come back.
    let per_request = if level == LogLevel::Debug { LevelFilter::DEBUG } else { LevelFilter::OFF };
    targets.with_target("kube_client::client::builder", per_request)
}

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    /// A path of `LOG_OUTPUT_PATHS` or `LOG_ERROR_OUTPUT_PATHS` could not be opened for appending.
    #[error("opening log output {path}: {source}")]
    Output {
        /// The path as configured.
        path: String,
        /// Why it could not be opened.
        source: std::io::Error,
    },
    /// Logging was set up before in this process.
    #[error("a global logger is already installed")]
    AlreadySet,
}

/// Installs the JSON logger as the process's global subscriber: `LOG_LEVEL`, `LOG_OUTPUT_PATHS`,
/// `LOG_ERROR_OUTPUT_PATHS` (ERROR lines also go there, except to a path `LOG_OUTPUT_PATHS` names already, so no
/// line is written twice to one place), and `commit` on every line.
pub fn init(config: &LogConfig, commit: &str, clock: Arc<dyn Clock>) -> Result<(), LoggingError> {
    use tracing_subscriber::layer::SubscriberExt;
    let open = |paths: &mut dyn Iterator<Item = &String>| {
        paths
            .map(|p| LogOutput::open(p).map_err(|source| LoggingError::Output { path: p.clone(), source }))
            .collect::<Result<Vec<_>, _>>()
    };
    let outputs = open(&mut config.output_paths.iter())?;
    let error_outputs =
        open(&mut config.error_output_paths.iter().filter(|p| !p.is_empty() && !config.output_paths.contains(p)))?;
    let layer =
        JsonLayer::new(outputs, commit, clock).with_error_outputs(error_outputs).with_filter(filter(config.level));
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
        .map_err(|_| LoggingError::AlreadySet)
}

/// The JSON-lines layer (see the module docs).
#[derive(Debug)]
pub struct JsonLayer {
    outputs: Vec<LogOutput>,
    /// Where ERROR lines also go (`LOG_ERROR_OUTPUT_PATHS`).
    error_outputs: Vec<LogOutput>,
    commit: String,
    clock: Arc<dyn Clock>,
}

/// Fields of a span, stored in its extensions.
struct SpanFields(BTreeMap<String, Value>);

struct Visitor<'a>(&'a mut BTreeMap<String, Value>);

impl Visit for Visitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), Value::String(value.to_string()));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_string(), Value::Bool(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0.insert(field.name().to_string(), Value::String(value.to_string()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_string(), Value::String(format!("{value:?}")));
    }
}

/// Whether a field name is named like an object kind: upper camel case (an ASCII capital first, ASCII letters
/// and digits only, at least one lower-case letter, so `NodeClaim` and `EC2NodeClass` are and `ID` is not).
fn names_a_kind(key: &str) -> bool {
    key.starts_with(|c: char| c.is_ascii_uppercase())
        && key.chars().all(|c| c.is_ascii_alphanumeric())
        && key.chars().any(|c| c.is_ascii_lowercase())
}

/// Upstream's object-reference shape for string fields named like a kind: `{"name": …}`, with the namespace of
/// a `namespace/name` key.
fn object_ref(key: &str, value: Value) -> Value {
    let Value::String(s) = &value else { return value };
    if !names_a_kind(key) {
        return value;
    }
    match s.split_once('/') {
        Some((namespace, name)) => serde_json::json!({ "namespace": namespace, "name": name }),
        None => serde_json::json!({ "name": s }),
    }
}

fn level_name(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "ERROR",
        Level::WARN => "WARN",
        Level::INFO => "INFO",
        Level::DEBUG => "DEBUG",
        Level::TRACE => "DEBUG",
    }
}

impl JsonLayer {
    /// A layer writing every line to `outputs`, with `commit` on each and times from `clock`.
    pub fn new(outputs: Vec<LogOutput>, commit: &str, clock: Arc<dyn Clock>) -> Self {
        Self { outputs, error_outputs: Vec::new(), commit: commit.to_string(), clock }
    }

    /// ERROR lines also go to `outputs` (besides the layer's own outputs).
    pub fn with_error_outputs(mut self, outputs: Vec<LogOutput>) -> Self {
        self.error_outputs = outputs;
        self
    }

    fn line(&self, level: &Level, mut fields: BTreeMap<String, Value>) -> String {
        let message = match fields.remove("message") {
            Some(Value::String(s)) => s,
            Some(other) => other.to_string(),
            None => String::new(),
        };
        let logger = match fields.remove("logger") {
            Some(Value::String(s)) => s,
            _ => "controller".to_string(),
        };
        let time = self.clock.now().format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
        let mut line = String::with_capacity(256);
        let _ = write!(
            line,
            "{{\"level\":\"{}\",\"time\":{},\"logger\":{},\"message\":{},\"commit\":{}",
            level_name(level),
            Value::String(time),
            Value::String(logger),
            Value::String(message),
            Value::String(self.commit.clone()),
        );
        for (key, value) in fields {
            if matches!(key.as_str(), "level" | "time" | "commit") {
                continue;
            }
            let value = object_ref(&key, value);
            let _ = write!(line, ",{}:{}", Value::String(key), value);
        }
        line.push_str("}\n");
        line
    }
}

impl<S> Layer<S> for JsonLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Visitor(&mut fields));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields(fields));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            let mut ext = span.extensions_mut();
            match ext.get_mut::<SpanFields>() {
                Some(fields) => values.record(&mut Visitor(&mut fields.0)),
                None => {
                    let mut fields = BTreeMap::new();
                    values.record(&mut Visitor(&mut fields));
                    ext.insert(SpanFields(fields));
                }
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                if let Some(span_fields) = span.extensions().get::<SpanFields>() {
                    fields.extend(span_fields.0.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            }
        }
        event.record(&mut Visitor(&mut fields));
        let line = self.line(event.metadata().level(), fields);
        let errors = if *event.metadata().level() == Level::ERROR { &self.error_outputs[..] } else { &[] };
        for output in self.outputs.iter().chain(errors) {
            output.write_line(line.as_bytes());
        }
    }
}

/// A JSON map of a log line, for tests and tools reading logs.
pub fn parse_line(line: &str) -> Option<Map<String, Value>> {
    match serde_json::from_str(line) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_testing::FakeClock;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn error_lines_also_go_to_the_error_outputs() {
        let all = Arc::new(Mutex::new(Vec::new()));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let clock = FakeClock::default();
        let layer = JsonLayer::new(vec![LogOutput::Buffer(all.clone())], "c", Arc::new(clock))
            .with_error_outputs(vec![LogOutput::Buffer(errors.clone())]);
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
            tracing::info!("fine");
            tracing::error!("broken");
        });
        let text = |b: &Arc<Mutex<Vec<u8>>>| String::from_utf8(b.lock().expect("buffer").clone()).expect("UTF-8");
        let messages = |t: String| -> Vec<String> {
            t.lines().filter_map(parse_line).map(|m| m["message"].as_str().unwrap_or_default().to_owned()).collect()
        };
        assert_eq!(messages(text(&all)), ["fine", "broken"]);
        assert_eq!(messages(text(&errors)), ["broken"]);
    }

    #[test]
    fn kube_clients_per_request_errors_show_only_at_debug() {
        let lines = capture(LogLevel::Info, || {
            tracing::error!(target: "kube_client::client::builder", "failed with error client error (Connect)");
            tracing::error!(target: "kube_client::client", "other kube errors still show");
        });
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("other kube errors still show"));
        let lines = capture(LogLevel::Debug, || {
            tracing::error!(target: "kube_client::client::builder", "failed with error client error (Connect)");
        });
        assert_eq!(lines.len(), 1, "{lines:?}");
    }

    fn capture(level: LogLevel, body: impl FnOnce()) -> Vec<String> {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let clock = FakeClock::default();
        clock.step(chrono::Duration::milliseconds(1234));
        let layer = JsonLayer::new(vec![LogOutput::Buffer(buffer.clone())], "abc1234", Arc::new(clock))
            .with_filter(filter(level));
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), body);
        let text = String::from_utf8(buffer.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_string).collect()
    }

    #[test]
    fn lines_have_upstreams_shape() {
        let lines = capture(LogLevel::Info, || {
            let span = tracing::info_span!("reconcile", controller = "provisioner", NodePool = "default");
            let _guard = span.enter();
            tracing::info!(NodeClaim = "default-x7b2k", Pod = "web/api-0", pods = 3_u64, "created nodeclaim");
        });
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(
            lines[0],
            "{\"level\":\"INFO\",\"time\":\"2024-01-01T00:00:01.234Z\",\"logger\":\"controller\",\
             \"message\":\"created nodeclaim\",\"commit\":\"abc1234\",\"NodeClaim\":{\"name\":\"default-x7b2k\"},\
             \"NodePool\":{\"name\":\"default\"},\"Pod\":{\"name\":\"api-0\",\"namespace\":\"web\"},\
             \"controller\":\"provisioner\",\"pods\":3}"
        );
        let parsed = parse_line(&lines[0]).unwrap();
        let keys: Vec<&String> = parsed.keys().collect();
        for key in ["level", "time", "logger", "message", "commit", "controller", "NodeClaim"] {
            assert!(keys.iter().any(|k| *k == key), "{key} missing");
        }
    }

    /// Any kind is logged as an object reference, a provider's too, without the runtime listing it; other
    /// fields keep their values.
    #[test]
    fn fields_named_like_a_kind_are_object_references() {
        let lines = capture(LogLevel::Info, || {
            tracing::info!(
                EC2NodeClass = "default",
                ToyNodeClass = "small",
                CapacityBuffer = "team-a/buffer",
                ID = "i-1",
                path = "a/b",
                NodeClaimCount = 3_u64,
                "resolved"
            );
        });
        let parsed = parse_line(&lines[0]).expect("a JSON line");
        assert_eq!(parsed["EC2NodeClass"], serde_json::json!({"name": "default"}));
        assert_eq!(parsed["ToyNodeClass"], serde_json::json!({"name": "small"}));
        assert_eq!(parsed["CapacityBuffer"], serde_json::json!({"namespace": "team-a", "name": "buffer"}));
        assert_eq!(parsed["ID"], "i-1");
        assert_eq!(parsed["path"], "a/b");
        assert_eq!(parsed["NodeClaimCount"], 3, "only strings name an object");
        assert!(lines[0].contains("\"EC2NodeClass\":{\"name\":\"default\"}"), "{}", lines[0]);
    }

    #[test]
    fn log_level_selects_levels_and_inner_spans_override() {
        let emit = || {
            let outer = tracing::info_span!("outer", controller = "disruption");
            let _o = outer.enter();
            let inner = tracing::info_span!("inner", controller = "disruption.queue", logger = "controller.queue");
            let _i = inner.enter();
            tracing::debug!("debug line");
            tracing::info!("info line");
            tracing::warn!(error = "boom", "warn line");
            tracing::error!("error line");
            tracing::debug!(target: "hyper::proto", "dependency debug");
        };
        let levels = |lines: &[String]| -> Vec<String> {
            lines.iter().map(|l| parse_line(l).unwrap()["level"].as_str().unwrap().to_string()).collect()
        };
        let debug = capture(LogLevel::Debug, emit);
        assert_eq!(levels(&debug), ["DEBUG", "INFO", "WARN", "ERROR"], "hyper's debug line is filtered");
        assert_eq!(levels(&capture(LogLevel::Info, emit)), ["INFO", "WARN", "ERROR"]);
        assert_eq!(levels(&capture(LogLevel::Error, emit)), ["ERROR"]);
        let warn = parse_line(&debug[2]).unwrap();
        assert_eq!(warn["controller"], "disruption.queue");
        assert_eq!(warn["logger"], "controller.queue");
        assert_eq!(warn["error"], "boom");
        assert_eq!(warn["message"], "warn line");
    }

    #[test]
    fn messages_are_escaped_and_files_append() {
        let lines = capture(LogLevel::Info, || tracing::info!("quote \" and\nnewline"));
        assert_eq!(parse_line(&lines[0]).unwrap()["message"], "quote \" and\nnewline");

        let path = std::env::temp_dir().join(format!("karpenter-runtime-log-{}", std::process::id()));
        let output = LogOutput::open(path.to_str().unwrap()).unwrap();
        output.write_line(b"{\"a\":1}\n");
        LogOutput::open(path.to_str().unwrap()).unwrap().write_line(b"{\"a\":2}\n");
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).ok();
        assert_eq!(text, "{\"a\":1}\n{\"a\":2}\n");
        assert!(LogOutput::open("/nonexistent-dir/x.log").is_err());
    }
}
