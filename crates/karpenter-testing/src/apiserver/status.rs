//! Errors as the API server reports them: a `meta/v1` `Status` object with the HTTP code and reason the real
//! server uses, so `kube` turns them into `kube::Error::Api` with the same `code` and `reason`.

use serde_json::{Value, json};

/// One failed request, in the terms of a `Status` object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code (404, 409, 410, 422, …).
    pub code: u16,
    /// The machine-readable reason (`NotFound`, `AlreadyExists`, `Conflict`, `Expired`, `Gone`, …).
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// `details` of the Status: (group, kind (the resource's plural, as the real server puts it), name).
    pub details: Option<Box<(String, String, String)>>,
    /// `details.causes` of the Status: (reason, message) pairs (the eviction's `DisruptionBudget` cause); boxed
    /// to keep the error small.
    pub causes: Option<Box<[(String, String)]>>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self { code, reason, message: message.into(), details: None, causes: None }
    }

    fn with_details(mut self, group: &str, resource: &str, name: &str) -> Self {
        self.details = Some(Box::new((group.to_string(), resource.to_string(), name.to_string())));
        self
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 404 NotFound for an object: `pods "x" not found`.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{} \"{name}\" not found", qualified(group, resource)))
            .with_details(group, resource, name)
    }

    /// 404 NotFound for a path the server does not serve.
    pub fn no_route(message: impl Into<String>) -> Self {
        Self::new(404, "NotFound", message)
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 409 AlreadyExists.
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        Self::new(409, "AlreadyExists", format!("{} \"{name}\" already exists", qualified(group, resource)))
            .with_details(group, resource, name)
    }

    /// 409 Conflict on a stale resourceVersion or a failed precondition.
    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {} \"{name}\": {why}", qualified(group, resource)),
        )
        .with_details(group, resource, name)
    }

    /// 403 Forbidden.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// 410 Expired: a resourceVersion older than the retained event history.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    /// 422 Invalid.
    pub fn invalid(group: &str, resource: &str, name: &str, message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", format!("{} \"{name}\" is invalid: {}", qualified(group, resource), message.into()))
            .with_details(group, resource, name)
    }

    /// 429 TooManyRequests with `details.causes` (an eviction refused by a PodDisruptionBudget).
    pub fn too_many_requests(message: impl Into<String>, causes: Vec<(String, String)>) -> Self {
        Self { causes: Some(causes.into_boxed_slice()), ..Self::new(429, "TooManyRequests", message) }
    }

    /// A 500 failure without a reason, as the real server's eviction answers for a pod with several budgets.
    pub fn failure_500(message: impl Into<String>) -> Self {
        Self::new(500, "", message)
    }

    /// 500 InternalError (never expected; reported instead of panicking).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let (Some((group, kind, name)), Some(obj)) = (self.details.as_deref(), status.as_object_mut()) {
            let mut details = serde_json::Map::new();
            details.insert("name".into(), Value::String(name.clone()));
            if !group.is_empty() {
                details.insert("group".into(), Value::String(group.clone()));
            }
            details.insert("kind".into(), Value::String(kind.clone()));
            obj.insert("details".into(), Value::Object(details));
        }
        if let Some(causes) = &self.causes
            && let Some(obj) = status.as_object_mut()
        {
            let causes: Vec<Value> =
                causes.iter().map(|(reason, message)| json!({"reason": reason, "message": message})).collect();
            let details = obj.entry("details").or_insert_with(|| json!({}));
            if let Some(d) = details.as_object_mut() {
                d.insert("causes".into(), Value::Array(causes));
            }
        }
        if self.reason.is_empty()
            && let Some(obj) = status.as_object_mut()
        {
            obj.remove("reason");
        }
        status
    }
}

/// `pods` for the core group, `nodepools.karpenter.sh` otherwise (as in the real server's messages).
fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() { resource.to_string() } else { format!("{resource}.{group}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_objects_carry_code_reason_and_details() {
        let s = ApiError::not_found("karpenter.sh", "nodepools", "default").to_status();
        assert_eq!(s["code"], 404);
        assert_eq!(s["reason"], "NotFound");
        assert_eq!(s["message"], "nodepools.karpenter.sh \"default\" not found");
        assert_eq!(s["details"]["group"], "karpenter.sh");
        let s = ApiError::conflict("", "pods", "p", "the object has been modified").to_status();
        assert_eq!(s["code"], 409);
        assert!(s["details"].get("group").is_none());
        assert_eq!(s["message"], "Operation cannot be fulfilled on pods \"p\": the object has been modified");
    }
}
