//! Step 5 of a lifecycle pass: deleting a claim that was not launched or not registered in time (see the module
//! docs of [`super`]).

use std::time::Duration;

use karpenter_api::nodeclaim::conditions as cond;
use karpenter_api::time::{chrono_duration, from_k8s};

use super::{CONTROLLER, LAUNCH_TTL, LifecycleError, Pass, REGISTRATION_TTL, delete_claim, transition_time};

/// What a liveness check decided.
pub(super) enum Liveness {
    /// The claim timed out and was deleted.
    Deleted,
    /// Still within its time; look again after this long (`None`: registered, nothing to time).
    Alive(Option<Duration>),
}

impl Pass<'_> {
    /// Step 5: liveness. A claim not launched within [`LAUNCH_TTL`] of its launch attempt, or not registered
    /// within [`REGISTRATION_TTL`] of its launch, is deleted.
    pub(super) async fn liveness(&self, registered: bool) -> Result<Liveness, LifecycleError> {
        if registered {
            return Ok(Liveness::Alive(None));
        }
        let since_condition =
            |type_: &str| self.status.conditions.iter().find(|c| c.type_ == type_).and_then(transition_time);
        let (ttl, since, why) = if self.is_true(cond::LAUNCHED) {
            (REGISTRATION_TTL, since_condition(cond::REGISTERED).unwrap_or(self.now), "registration_timeout")
        } else {
            let creation = self.claim.metadata.creation_timestamp.as_ref().and_then(from_k8s);
            (LAUNCH_TTL, since_condition(cond::LAUNCHED).or(creation).unwrap_or(self.now), "launch_timeout")
        };
        let left = chrono_duration(ttl) - (self.now - since);
        if left > chrono::Duration::zero() {
            return Ok(Liveness::Alive(Some(left.to_std().unwrap_or(Duration::from_secs(1)))));
        }
        let name = &self.name;
        if why == "launch_timeout" {
            tracing::error!(controller = CONTROLLER, NodeClaim = %name, "launch timed out, deleting nodeclaim");
        } else {
            tracing::error!(controller = CONTROLLER, NodeClaim = %name, "registration timed out, deleting nodeclaim");
        }
        delete_claim(self.ctx, &self.claim, why).await?;
        Ok(Liveness::Deleted)
    }
}
