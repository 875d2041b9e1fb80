//! DRA devices as the simulation sees them: a device's name, typed attributes and capacities, and the slices a
//! cloud provider says a node of an instance type will publish ([`DeviceSliceTemplate`]).
//!
//! These live here, next to [`crate::InstanceType`], because an instance type carries its slice templates; the
//! API crate's ResourceSlice conversion builds the same [`Device`] from published slices.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;

use crate::Quantity;

/// A typed device attribute (exactly one of the API's `bool`, `int`, `string`, `version`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceAttribute {
    /// A boolean attribute (`bool`).
    Bool(bool),
    /// A 64-bit integer attribute (`int`).
    Int(i64),
    /// A string attribute (`string`).
    String(String),
    /// A semantic version, kept as written.
    Version(String),
}

/// One device of a pool.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Device {
    /// Unique in its pool.
    pub name: String,
    /// Attributes by qualified name (`domain/id`, or `id` alone meaning the driver's domain).
    pub attributes: BTreeMap<String, DeviceAttribute>,
    /// Capacities by qualified name.
    pub capacity: BTreeMap<String, Quantity>,
    /// DRA device taints (`key`, `value`, `effect` NoSchedule or NoExecute): only a request tolerating them may
    /// be given the device. Kept as core taints so pod and device tolerations match by one rule
    /// ([`crate::taints::tolerates`]).
    pub taints: Vec<Taint>,
    /// Shared counters the device uses up while allocated (partitionable devices), per counter set of its
    /// slice.
    pub consumes_counters: Vec<CounterSet>,
}

/// The effects a DRA device taint may have (the API server allows no other).
pub const DEVICE_TAINT_EFFECTS: [&str; 2] = ["NoSchedule", "NoExecute"];

/// Named counters: a slice's `sharedCounters` entry (what is available) or a device's `consumesCounters`
/// entry (what the device takes from the set named `name`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CounterSet {
    /// The counter set's name, unique in its slice; a device's entry names the slice set it consumes from.
    pub name: String,
    /// Counter values by counter name: the amount available (slice) or taken (device).
    pub counters: BTreeMap<String, Quantity>,
}

impl Device {
    /// A device without attributes or capacity.
    pub fn named(name: impl Into<String>) -> Self {
        Device { name: name.into(), ..Default::default() }
    }

    /// Adds an attribute (builder style).
    pub fn with_attribute(mut self, name: impl Into<String>, value: DeviceAttribute) -> Self {
        self.attributes.insert(name.into(), value);
        self
    }

    /// Adds a capacity (builder style).
    pub fn with_capacity(mut self, name: impl Into<String>, value: Quantity) -> Self {
        self.capacity.insert(name.into(), value);
        self
    }
}

/// The devices one DRA driver will publish on a node of an instance type, before the node exists. The pool is
/// named after the node once it registers, so a template has no pool name.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeviceSliceTemplate {
    /// The DRA driver that will publish the devices (e.g. `gpu.nvidia.com`).
    pub driver: String,
    /// The devices of the slice, as the driver will publish them.
    pub devices: Vec<Device>,
    /// Counter sets the devices consume from (partitionable devices); each node has its own.
    pub shared_counters: Vec<CounterSet>,
}
