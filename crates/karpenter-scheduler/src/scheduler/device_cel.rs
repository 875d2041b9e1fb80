//! CEL device selectors of DRA (device classes' and requests' `selectors`), compiled with the Kubernetes CEL
//! library (quantity functions included) and evaluated against devices as the API server's DRA environment
//! presents them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use karpenter_requirements::{Device, DeviceAttribute, Quantity};
use kube_cel::KubeCelExt;
use kube_cel::cel::objects::{Key, Map};
use kube_cel::cel::{Context, Program, Value};

/// A CEL value (a device as selectors see it, [`SelectorEnv::device_value`]).
pub(crate) type CelValue = Value;

/// A compiled CEL device selector. Expressions see `device.driver`, `device.attributes[domain].id` and
/// `device.capacity[domain].id` (a quantity), as the API server's DRA CEL environment does; an unqualified
/// attribute or capacity name belongs to the driver's domain.
#[derive(Debug)]
pub(crate) struct DeviceSelector {
    expression: String,
    program: Program,
}

impl DeviceSelector {
    /// Compiles `expression`; the error names it and gives the CEL parser's message.
    pub(crate) fn compile(expression: &str) -> Result<Self, String> {
        Program::compile(expression)
            .map(|program| DeviceSelector { expression: expression.to_owned(), program })
            .map_err(|e| {
                let reason = e.to_string().lines().next().unwrap_or("syntax error").to_owned();
                format!("invalid CEL selector {expression:?}: {reason}")
            })
    }
}

/// Evaluates device selectors. Holds the CEL context with the Kubernetes functions, built once and reused for
/// every device.
pub(crate) struct SelectorEnv {
    root: Context<'static>,
    quantity: Option<Program>,
}

impl std::fmt::Debug for SelectorEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SelectorEnv")
    }
}

impl Default for SelectorEnv {
    fn default() -> Self {
        Self::new()
    }
}

impl SelectorEnv {
    /// A context with the compiled-in Kubernetes CEL functions (quantity among them).
    pub(crate) fn new() -> Self {
        let root = Context::default().with_all();
        SelectorEnv { root, quantity: Program::compile("quantity(q)").ok() }
    }

    /// The CEL value of `device` published by `driver` (build once per device, evaluate many selectors on it).
    pub(crate) fn device_value(&self, driver: &str, device: &Device) -> Value {
        let mut attributes: BTreeMap<&str, HashMap<Key, Value>> = BTreeMap::new();
        for (key, a) in &device.attributes {
            let (domain, id) = split_qualified(driver, key);
            let v = match a {
                DeviceAttribute::Bool(b) => Value::Bool(*b),
                DeviceAttribute::Int(i) => Value::Int(*i),
                DeviceAttribute::String(s) | DeviceAttribute::Version(s) => Value::String(Arc::new(s.clone())),
            };
            attributes.entry(domain).or_default().insert(Key::String(Arc::new(id.to_owned())), v);
        }
        let mut capacity: BTreeMap<&str, HashMap<Key, Value>> = BTreeMap::new();
        for (key, q) in &device.capacity {
            let (domain, id) = split_qualified(driver, key);
            capacity.entry(domain).or_default().insert(Key::String(Arc::new(id.to_owned())), self.quantity_value(q));
        }
        let nest = |m: BTreeMap<&str, HashMap<Key, Value>>| -> Value {
            let outer: HashMap<Key, Value> = m
                .into_iter()
                .map(|(d, inner)| (Key::String(Arc::new(d.to_owned())), Value::Map(Map::from(inner))))
                .collect();
            Value::Map(Map::from(outer))
        };
        let mut top: HashMap<Key, Value> = HashMap::new();
        top.insert(Key::String(Arc::new("driver".into())), Value::String(Arc::new(driver.to_owned())));
        top.insert(Key::String(Arc::new("attributes".into())), nest(attributes));
        top.insert(Key::String(Arc::new("capacity".into())), nest(capacity));
        Value::Map(Map::from(top))
    }

    fn quantity_value(&self, q: &Quantity) -> Value {
        let text = q.to_string();
        let Some(program) = &self.quantity else { return Value::String(Arc::new(text)) };
        let mut ctx = self.root.new_inner_scope();
        ctx.add_variable_from_value("q", Value::String(Arc::new(text.clone())));
        program.execute(&ctx).unwrap_or(Value::String(Arc::new(text)))
    }

    /// Whether `selector` is true for the device value `device` ([`SelectorEnv::device_value`]). A runtime error
    /// (a missing attribute, a non-boolean result) is an error naming the expression, as the API server reports.
    pub(crate) fn matches(&self, selector: &DeviceSelector, device: &Value) -> Result<bool, String> {
        let mut ctx = self.root.new_inner_scope();
        ctx.add_variable_from_value("device", device.clone());
        match selector.program.execute(&ctx) {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!("CEL selector {:?} returned {other:?}, not a boolean", selector.expression)),
            Err(e) => Err(format!("CEL selector {:?}: {e}", selector.expression)),
        }
    }
}

/// `domain/id` → (domain, id); an unqualified name belongs to the driver's domain.
fn split_qualified<'a>(driver: &'a str, key: &'a str) -> (&'a str, &'a str) {
    key.split_once('/').unwrap_or((driver, key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_requirements::Device;

    #[test]
    fn selectors_see_driver_attributes_and_quantities() {
        let env = SelectorEnv::new();
        let gpu = Device::named("gpu-0")
            .with_attribute("model", DeviceAttribute::String("A100".into()))
            .with_attribute("gpu.example.com/index", DeviceAttribute::Int(0))
            .with_capacity("memory", "80Gi".parse().expect("quantity"));
        let device = env.device_value("gpu.example.com", &gpu);
        let check = |expr: &str| env.matches(&DeviceSelector::compile(expr).expect("compiles"), &device);
        assert_eq!(check(r#"device.driver == "gpu.example.com""#), Ok(true));
        assert_eq!(check(r#"device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0"#), Ok(true));
        assert_eq!(check(r#"device.capacity["gpu.example.com"].memory.compareTo(quantity("100Gi")) >= 0"#), Ok(false));
        assert_eq!(check(r#"device.attributes["gpu.example.com"].index == 0"#), Ok(true));
        assert_eq!(check(r#"device.attributes["gpu.example.com"].model == "A100""#), Ok(true));
        assert_eq!(check(r#"device.attributes["gpu.example.com"].model == "H100""#), Ok(false));
        let missing = check(r#"device.attributes["other.com"].model == "x""#).expect_err("no such domain");
        assert!(missing.contains("other.com"), "{missing}");
        assert!(check("device.driver").expect_err("not a boolean").contains("not a boolean"));
        assert!(DeviceSelector::compile("device.driver ==").is_err());
    }
}
