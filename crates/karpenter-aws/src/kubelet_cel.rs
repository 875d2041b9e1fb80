//! CEL kubelet values of an EC2NodeClass (upstream v1.15, AWS gate `NodeClassCEL`): a string `maxPods` and the
//! `kubeReserved` / `systemReserved` values that are not quantities ([`ReservedValue`]) are CEL expressions,
//! evaluated per instance type. Pure: no IO, no clock.
//!
//! * Variables ([`Variables`], all ints but `instance_type`): `vcpus`, `memory_mib` (EC2's `SizeInMiB`),
//!   `default_enis` (ENIs of the default network card), `ips_per_eni` (IPv4 addresses per ENI), `max_pods`,
//!   `instance_type`.
//! * `max(a, b)` / `min(a, b)` for every int/double pair: two ints give an int, anything with a double a double.
//!   The other standard functions of the `cel` crate (`int`, `double`, `string`, `size`, `startsWith`, ...) work.
//! * Order: `maxPods` first, where `max_pods` is the family default (ENI-limited or 110, reserved ENIs and
//!   `podsPerCore` applied); then the reserved expressions, where `max_pods` is the resolved value.
//! * Results: an int as is; a double truncated toward zero (±Inf and NaN are errors); anything else is an error.
//!   `maxPods` must be within `0..=i32::MAX`. A reserved value must not be negative and is read in its key's unit:
//!   `cpu` millicores rounded up to a multiple of 10m, `memory` MiB rounded up to a multiple of 16Mi,
//!   `ephemeral-storage` GiB, `pid` a count.
//! * Compile errors: a parse error, a variable other than the six, or a function call outside [`FUNCTIONS`]. The
//!   `cel` crate has no type checker, so this reference check stands in for one; list macros (`exists`, `map`, ...)
//!   are refused because their loop variable looks like an unknown variable.
//!
//! Programs are compiled once per expression text and kept in a process-wide cache. Upstream expires its cache
//! entries after 12 h; an expression's program never goes stale, so ours is bounded by size instead
//! ([`PROGRAM_CACHE_CAPACITY`], emptied when full) and reads no clock.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use crate::api::{KubeletConfiguration, ReservedValue};
use cel::objects::Value;
use cel::{Context, ExecutionError, Program};
use karpenter_requirements::{Format, Quantity, ResourceList};

/// The variables an expression may read.
pub const VARIABLES: [&str; 6] = ["vcpus", "memory_mib", "default_enis", "ips_per_eni", "max_pods", "instance_type"];

/// The named functions an expression may call (operators are always allowed).
pub const FUNCTIONS: [&str; 11] =
    ["max", "min", "int", "double", "uint", "string", "size", "contains", "startsWith", "endsWith", "matches"];

/// Distinct expression texts kept compiled.
pub const PROGRAM_CACHE_CAPACITY: usize = 1024;

const MIB: i64 = 1 << 20;
const GIB: i64 = 1 << 30;

/// Where an expression sits in `spec.kubelet`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExpressionField {
    /// `maxPods`.
    MaxPods,
    /// `kubeReserved[key]`.
    KubeReserved(String),
    /// `systemReserved[key]`.
    SystemReserved(String),
}

impl fmt::Display for ExpressionField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExpressionField::MaxPods => f.write_str("maxPods"),
            ExpressionField::KubeReserved(k) => write!(f, "kubeReserved[{k}]"),
            ExpressionField::SystemReserved(k) => write!(f, "systemReserved[{k}]"),
        }
    }
}

/// A kubelet expression that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KubeletExpressionError {
    /// It does not compile.
    #[error("kubelet {field} expression {expression:?} is invalid: {message}")]
    Invalid {
        /// Where it sits.
        field: ExpressionField,
        /// The expression.
        expression: String,
        /// What is wrong.
        message: String,
    },
    /// It fails, or gives an unusable value, for an instance type.
    #[error("kubelet {field} expression {expression:?} failed for instance type {instance_type}: {message}")]
    Evaluation {
        /// Where it sits.
        field: ExpressionField,
        /// The expression.
        expression: String,
        /// The instance type it was evaluated for.
        instance_type: String,
        /// What went wrong.
        message: String,
    },
}

/// The values of the variables for one instance type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Variables {
    /// vCPUs.
    pub vcpus: i64,
    /// Memory in MiB, as EC2 reports it.
    pub memory_mib: i64,
    /// ENIs of the default network card.
    pub default_enis: i64,
    /// IPv4 addresses per ENI.
    pub ips_per_eni: i64,
    /// The family default (for `maxPods`) or the resolved max pods (for the reserved expressions).
    pub max_pods: i64,
    /// The instance type name.
    pub instance_type: String,
}

#[derive(Clone, Debug)]
struct Compiled {
    field: ExpressionField,
    source: String,
    program: Arc<Program>,
}

/// The compiled expressions of one `spec.kubelet` (empty when it has none).
#[derive(Clone, Debug, Default)]
pub struct KubeletExpressions {
    max_pods: Option<Compiled>,
    reserved: Vec<Compiled>,
}

impl PartialEq for KubeletExpressions {
    fn eq(&self, other: &Self) -> bool {
        let key = |c: &Compiled| (c.field.clone(), c.source.clone());
        self.max_pods.as_ref().map(key) == other.max_pods.as_ref().map(key)
            && self.reserved.iter().map(key).eq(other.reserved.iter().map(key))
    }
}

/// The reserved values one instance type's expressions resolved to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResolvedReserved {
    /// `kubeReserved` entries that were expressions.
    pub kube_reserved: ResourceList,
    /// `systemReserved` entries that were expressions.
    pub system_reserved: ResourceList,
}

impl KubeletExpressions {
    /// Compiles every expression of `kubelet`; the first that does not compile is the error.
    pub fn compile(kubelet: &KubeletConfiguration) -> Result<Self, KubeletExpressionError> {
        let max_pods = kubelet
            .max_pods
            .as_ref()
            .and_then(|m| m.as_expression())
            .map(|e| compiled(ExpressionField::MaxPods, e))
            .transpose()?;
        let kube = expressions(&kubelet.kube_reserved).map(|(k, e)| (ExpressionField::KubeReserved(k.clone()), e));
        let system =
            expressions(&kubelet.system_reserved).map(|(k, e)| (ExpressionField::SystemReserved(k.clone()), e));
        let reserved = kube.chain(system).map(|(f, e)| compiled(f, e)).collect::<Result<_, _>>()?;
        Ok(Self { max_pods, reserved })
    }

    /// Whether there is no expression.
    pub fn is_empty(&self) -> bool {
        self.max_pods.is_none() && self.reserved.is_empty()
    }

    /// The `maxPods` expression's value (`None` without one); `vars.max_pods` is the family default.
    pub fn max_pods(&self, vars: &Variables) -> Result<Option<i64>, KubeletExpressionError> {
        let Some(c) = &self.max_pods else { return Ok(None) };
        let v = evaluate(c, vars)?;
        if !(0..=i64::from(i32::MAX)).contains(&v) {
            return Err(c.failed(vars, format!("{v} is not between 0 and {}", i32::MAX)));
        }
        Ok(Some(v))
    }

    /// The reserved expressions' values; `vars.max_pods` is the resolved max pods.
    pub fn reserved(&self, vars: &Variables) -> Result<ResolvedReserved, KubeletExpressionError> {
        let mut out = ResolvedReserved::default();
        for c in &self.reserved {
            let (list, key) = match &c.field {
                ExpressionField::KubeReserved(k) => (&mut out.kube_reserved, k),
                ExpressionField::SystemReserved(k) => (&mut out.system_reserved, k),
                ExpressionField::MaxPods => continue,
            };
            let v = evaluate(c, vars)?;
            let q = reserved_quantity(key, v).map_err(|m| c.failed(vars, m))?;
            list.insert(key, q);
        }
        Ok(out)
    }
}

impl Compiled {
    fn failed(&self, vars: &Variables, message: String) -> KubeletExpressionError {
        KubeletExpressionError::Evaluation {
            field: self.field.clone(),
            expression: self.source.clone(),
            instance_type: vars.instance_type.clone(),
            message,
        }
    }
}

/// The expression-valued entries of a reserved map.
fn expressions(map: &std::collections::BTreeMap<String, String>) -> impl Iterator<Item = (&String, &str)> {
    map.iter().filter_map(|(k, v)| match ReservedValue::parse(v) {
        ReservedValue::Expression(e) => Some((k, e)),
        ReservedValue::Quantity(_) => None,
    })
}

fn compiled(field: ExpressionField, source: &str) -> Result<Compiled, KubeletExpressionError> {
    let program = program(source).map_err(|message| KubeletExpressionError::Invalid {
        field: field.clone(),
        expression: source.to_owned(),
        message,
    })?;
    Ok(Compiled { field, source: source.to_owned(), program })
}

static PROGRAMS: LazyLock<Mutex<HashMap<String, Arc<Program>>>> = LazyLock::new(Mutex::default);

/// The compiled, checked program of `source`, from the cache when it was compiled before.
fn program(source: &str) -> Result<Arc<Program>, String> {
    if let Some(p) = PROGRAMS.lock().unwrap_or_else(PoisonError::into_inner).get(source) {
        return Ok(p.clone());
    }
    let program = Program::compile(source).map_err(|e| e.to_string().trim().to_owned())?;
    check_references(&program)?;
    let program = Arc::new(program);
    let mut cache = PROGRAMS.lock().unwrap_or_else(PoisonError::into_inner);
    if cache.len() >= PROGRAM_CACHE_CAPACITY {
        cache.clear();
    }
    cache.insert(source.to_owned(), program.clone());
    Ok(program)
}

/// What a type checker would catch first: unknown variables and functions.
fn check_references(program: &Program) -> Result<(), String> {
    let refs = program.references();
    let mut unknown_vars: Vec<&str> = refs.variables().into_iter().filter(|v| !VARIABLES.contains(v)).collect();
    unknown_vars.sort_unstable();
    if let Some(v) = unknown_vars.first() {
        return Err(format!("undeclared variable {v:?} (the variables are {})", VARIABLES.join(", ")));
    }
    // Operators are named like `_+_` or `!_`; named functions start with a letter.
    let mut unknown_fns: Vec<&str> = refs
        .functions()
        .into_iter()
        .filter(|f| f.starts_with(|c: char| c.is_ascii_alphabetic()) && !FUNCTIONS.contains(f))
        .collect();
    unknown_fns.sort_unstable();
    if let Some(f) = unknown_fns.first() {
        return Err(format!("unknown function {f:?} (the functions are {})", FUNCTIONS.join(", ")));
    }
    Ok(())
}

fn evaluate(c: &Compiled, vars: &Variables) -> Result<i64, KubeletExpressionError> {
    let mut ctx = Context::default();
    ctx.add_function("max", max);
    ctx.add_function("min", min);
    for (name, v) in [
        ("vcpus", vars.vcpus),
        ("memory_mib", vars.memory_mib),
        ("default_enis", vars.default_enis),
        ("ips_per_eni", vars.ips_per_eni),
        ("max_pods", vars.max_pods),
    ] {
        ctx.add_variable_from_value(name, Value::Int(v));
    }
    ctx.add_variable_from_value("instance_type", Value::String(Arc::new(vars.instance_type.clone())));
    let value = c.program.execute(&ctx).map_err(|e| c.failed(vars, e.to_string()))?;
    to_int(&value).map_err(|m| c.failed(vars, m))
}

/// An int as is; a double truncated toward zero; anything else (and ±Inf, NaN, out-of-range) an error.
fn to_int(value: &Value) -> Result<i64, String> {
    match value {
        Value::Int(i) => Ok(*i),
        Value::UInt(u) => i64::try_from(*u).map_err(|_| format!("{u} is out of range")),
        Value::Float(f) if !f.is_finite() => Err(format!("{f} is not a finite number")),
        // `as` saturates; values past the i64 range are rejected rather than clamped.
        Value::Float(f) if f.trunc() >= -(2f64.powi(63)) && f.trunc() < 2f64.powi(63) => Ok(f.trunc() as i64),
        Value::Float(f) => Err(format!("{f} is out of range")),
        other => Err(format!("the result is a {}, not a number", other.type_of())),
    }
}

/// A reserved value in its key's unit: cpu millicores (up to a multiple of 10m), memory MiB (up to a multiple of
/// 16Mi), ephemeral-storage GiB, pid a count.
pub fn reserved_quantity(key: &str, v: i64) -> Result<Quantity, String> {
    if v < 0 {
        return Err(format!("{v} is negative"));
    }
    let too_large = || format!("{v} is too large for {key}");
    let round_up = |v: i64, step: i64| v.checked_add(step - 1).map(|x| x / step * step);
    match key {
        "cpu" => round_up(v, 10).map(Quantity::from_milli).ok_or_else(too_large),
        "memory" => round_up(v, 16)
            .and_then(|m| m.checked_mul(MIB))
            .map(|b| Quantity::from_int(b, Format::BinarySI))
            .ok_or_else(too_large),
        "ephemeral-storage" => {
            v.checked_mul(GIB).map(|b| Quantity::from_int(b, Format::BinarySI)).ok_or_else(too_large)
        }
        "pid" => Ok(Quantity::from_int(v, Format::DecimalSI)),
        other => Err(format!("{other:?} is not a reserved resource (cpu, memory, ephemeral-storage, pid)")),
    }
}

fn max(cel::extractors::Arguments(args): cel::extractors::Arguments) -> Result<Value, ExecutionError> {
    extremum("max", &args, true)
}

fn min(cel::extractors::Arguments(args): cel::extractors::Arguments) -> Result<Value, ExecutionError> {
    extremum("min", &args, false)
}

/// `max`/`min` of two numbers: two ints give an int; a double on either side gives a double (NaN propagates, so
/// the result check reports it).
fn extremum(name: &str, args: &[Value], larger: bool) -> Result<Value, ExecutionError> {
    let [a, b] = args else {
        return Err(ExecutionError::function_error(name, format!("takes 2 arguments, got {}", args.len())));
    };
    let number = |v: &Value| match v {
        Value::Int(i) => Ok(*i as f64),
        Value::UInt(u) => Ok(*u as f64),
        Value::Float(f) => Ok(*f),
        other => Err(ExecutionError::function_error(name, format!("wants numbers, got a {}", other.type_of()))),
    };
    if let (Value::Int(x), Value::Int(y)) = (a, b) {
        return Ok(Value::Int(if larger { *x.max(y) } else { *x.min(y) }));
    }
    let (x, y) = (number(a)?, number(b)?);
    let v = if x.is_nan() || y.is_nan() {
        f64::NAN
    } else if larger {
        x.max(y)
    } else {
        x.min(y)
    };
    Ok(Value::Float(v))
}

#[cfg(test)]
mod tests;
